"""Lifecycle events as standard-library log records on the ``sqla_queue`` logger.

Records carry ids, names, attempts and durations as ``extra`` fields for structured handlers;
never payloads, never claim tokens. A failed attempt's record carries the sanitized one-line
``error`` and the bounded, sanitized ``traceback`` the job row stores, and its message ends with
that traceback, so a plain text handler prints it the way it prints ``exc_info``. The live
exception is not passed as ``exc_info``: formatting it would print its full message (which may
quote the payload) and an unbounded stack.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from ...hookspecs import hookimpl

if TYPE_CHECKING:
    from ...events import (
        EmptyClaim,
        JobCancelled,
        JobClaimed,
        JobCompleted,
        JobEnqueued,
        JobFailed,
        JobRecovered,
        JobRetried,
        JobSnoozed,
        LostClaim,
    )

logger = logging.getLogger("sqla_queue")

LEVELS = {
    "sqla_queue_job_enqueued": logging.DEBUG,
    "sqla_queue_job_claimed": logging.DEBUG,
    "sqla_queue_job_completed": logging.INFO,
    "sqla_queue_job_retried": logging.WARNING,
    "sqla_queue_job_failed": logging.ERROR,
    "sqla_queue_job_snoozed": logging.INFO,
    "sqla_queue_job_cancelled": logging.INFO,
    "sqla_queue_job_recovered": logging.WARNING,
    "sqla_queue_lost_claim": logging.WARNING,
    "sqla_queue_empty_claim": logging.DEBUG,
}
"""The level each hook below logs its event at."""


COMPLETIONS_PER_SECOND = 20
"""At ``INFO``, at most this many completions a second are logged one by one; the worker's
progress line (every `worker.progress.PROGRESS_EVERY` seconds) counts them all. A record per
completion at thousands of jobs a second costs a third of a worker's CPU and floods a log
shipper; ``DEBUG`` logs every one."""


class CompletionBudget:
    """How many completion records the current second has left (thread-safe)."""

    def __init__(self, per_second: int, clock=time.monotonic) -> None:
        self.per_second = per_second
        self._clock = clock
        self._lock = threading.Lock()
        self._second = -1
        self._used = 0

    def left(self) -> bool:
        """True while this second's budget is not spent (it may be overspent by one batch)."""
        second = int(self._clock())
        return second != self._second or self._used < self.per_second

    def spend(self) -> bool:
        """Take one record from this second's budget; False when none is left."""
        second = int(self._clock())
        with self._lock:
            if second != self._second:
                self._second, self._used = second, 0
            if self._used >= self.per_second:
                return False
            self._used += 1
            return True


completion_budget = CompletionBudget(COMPLETIONS_PER_SECOND)


def ignores(hook_name: str) -> bool:
    """True when this plugin would drop `hook_name`'s event unread now: its level is not
    enabled on the ``sqla_queue`` logger, or (completions at ``INFO``) this second's budget of
    completion records is spent. `plugins.calls.heard` then builds no event."""
    level = LEVELS.get(hook_name)
    if level is None:
        return False
    if not logger.isEnabledFor(level):
        return True
    return hook_name == "sqla_queue_job_completed" and not _each_completion() and not completion_budget.left()


def _each_completion() -> bool:
    """``DEBUG`` on: every completion gets its record, whatever the rate."""
    return logger.isEnabledFor(logging.DEBUG)


def _seconds(value) -> float | None:
    return None if value is None else round(value.total_seconds(), 6)


@hookimpl
def sqla_queue_job_enqueued(event: JobEnqueued) -> None:
    if not logger.isEnabledFor(logging.DEBUG):  # per-job events: skip building the record
        return
    logger.debug(
        "enqueued job %s (%s on %s)%s", event.job_id, event.task, event.queue,
        " [deduplicated]" if event.deduplicated else "",
        extra={"job_id": event.job_id, "task": event.task, "queue": event.queue,
               "outcome": "deduplicated" if event.deduplicated else "enqueued"},
    )


@hookimpl
def sqla_queue_job_claimed(event: JobClaimed) -> None:
    if not logger.isEnabledFor(logging.DEBUG):  # per-job events: skip building the record
        return
    logger.debug(
        "claimed job %s (%s on %s), attempt %s", event.job_id, event.task, event.queue, event.attempt,
        extra={"job_id": event.job_id, "task": event.task, "queue": event.queue,
               "attempt": event.attempt, "outcome": "claimed"},
    )


@hookimpl
def sqla_queue_job_completed(event: JobCompleted) -> None:
    if not logger.isEnabledFor(logging.INFO):  # per-job events: skip building the record
        return
    if not _each_completion() and not completion_budget.spend():
        return  # counted in the worker's progress line
    logger.info(
        "completed job %s (%s on %s), attempt %s", event.job_id, event.task, event.queue, event.attempt,
        extra={"job_id": event.job_id, "task": event.task, "queue": event.queue,
               "attempt": event.attempt, "outcome": "completed",
               "duration": _seconds(event.duration)},
    )


def _failure_fields(event: JobRetried | JobFailed, outcome: str) -> dict:
    return {"job_id": event.job_id, "task": event.task, "queue": event.queue,
            "attempt": event.attempt, "outcome": outcome, "error": event.error,
            "traceback": event.traceback}


def _with_traceback(event: JobRetried | JobFailed) -> str:
    """The message's tail: the stored traceback on lines of its own, when there is one."""
    return f"\n{event.traceback}" if event.traceback else ""


@hookimpl
def sqla_queue_job_retried(event: JobRetried) -> None:
    logger.warning(
        "job %s (%s on %s) failed attempt %s, retrying at %s: %s%s",
        event.job_id, event.task, event.queue, event.attempt, event.run_at.isoformat(), event.error,
        _with_traceback(event), extra=_failure_fields(event, "retried"),
    )


@hookimpl
def sqla_queue_job_failed(event: JobFailed) -> None:
    logger.error(
        "job %s (%s on %s) failed for good on attempt %s: %s%s",
        event.job_id, event.task, event.queue, event.attempt, event.error,
        _with_traceback(event), extra=_failure_fields(event, "failed"),
    )


@hookimpl
def sqla_queue_job_snoozed(event: JobSnoozed) -> None:
    logger.info(
        "job %s (%s on %s) snoozed until %s (snooze %s)", event.job_id, event.task, event.queue,
        event.run_at.isoformat(), event.snoozes,
        extra={"job_id": event.job_id, "task": event.task, "queue": event.queue,
               "attempt": event.attempt, "outcome": "snoozed"},
    )


@hookimpl
def sqla_queue_job_cancelled(event: JobCancelled) -> None:
    logger.info(
        "cancelled job %s (%s on %s)%s", event.job_id, event.task, event.queue,
        " while it ran" if event.requested_while_running else "",
        extra={"job_id": event.job_id, "task": event.task, "queue": event.queue,
               "attempt": event.attempt, "outcome": "cancelled"},
    )


@hookimpl
def sqla_queue_job_recovered(event: JobRecovered) -> None:
    logger.warning(
        "recovered job %s (%s on %s) from an expired lease: now %s",
        event.job_id, event.task, event.queue, event.status.value,
        extra={"job_id": event.job_id, "task": event.task, "queue": event.queue,
               "outcome": f"recovered:{event.status.value}"},
    )


@hookimpl
def sqla_queue_lost_claim(event: LostClaim) -> None:
    logger.warning(
        "lost claim on job %s during %s: %s", event.job_id, event.operation, event.reason,
        extra={"job_id": event.job_id, "outcome": "lost_claim", "reason": event.reason},
    )


@hookimpl
def sqla_queue_empty_claim(event: EmptyClaim) -> None:
    if not logger.isEnabledFor(logging.DEBUG):  # per-job events: skip building the record
        return
    logger.debug(
        "claim on %s returned no job", event.queue,
        extra={"queue": event.queue, "outcome": "empty_claim"},
    )
