"""The reporter: a Sentry scope around each attempt, an event (or breadcrumb) per outcome.

Two halves, because neither alone knows enough. The run middleware (`sqla_queue_handle_job`)
knows the job (its idempotency key, its payload, to scrub) and runs the handler inside a fresh
Sentry isolation scope, so the handler's own breadcrumbs and events belong to that job and
carry its tags. But only the lifecycle events (`sqla_queue_job_retried`,
`sqla_queue_job_failed`) know how the attempt ended, after the retry hooks decided: so the
middleware keeps the scope of an attempt that raised, and the event hook reports the exception
from inside it, at the level its outcome deserves. An outcome reported without a kept scope (a
job failed outside any worker, an unknown task) is still reported, from a scope of its own.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import sentry_sdk
from sentry_sdk.scope import Scope, use_isolation_scope
from sentry_sdk.utils import event_from_exception

import sqla_queue as sq
from sqla_queue.types import JobFailed, JobRecovered, JobRetried

from . import _log_events
from ._scrub import payload_scrubber

RETRIES_ENV = "SQLA_QUEUE_SENTRY_RETRIES"
RETRY_MODES = ("breadcrumb", "warning", "error", "ignore")
"""What a failed attempt that will be retried becomes: a breadcrumb (the default), an event at
level ``warning`` or ``error``, or nothing."""
DEFAULT_RETRIES = "breadcrumb"

TAG = "sqla_queue."
MAX_TAG_VALUE = 200
"""Sentry cuts tag values at 200 characters; an idempotency key may have 512."""

KEPT_ATTEMPTS = 1024
"""Scopes of attempts that raised, waiting for their outcome (a lost claim never brings one,
so the oldest are dropped past this many)."""


class SentryReporter:
    """Reports handler exceptions to Sentry, through whatever ``sentry_sdk.init()`` set up.

    :param retries: what a failed attempt that will be retried becomes: ``"breadcrumb"``,
        ``"warning"``, ``"error"`` or ``"ignore"``. Default: ``$SQLA_QUEUE_SENTRY_RETRIES``, else
        ``"breadcrumb"``. The final failure is always an ``error`` event.
    :param scrub_payload: True (the default) strips local variables from every frame and
        replaces the job's payload values wherever the event carries text. False sends events
        as sentry-sdk builds them (local variables as its ``include_local_variables`` says).
    """

    def __init__(self, *, retries: str | None = None, scrub_payload: bool = True) -> None:
        self._retries = None if retries is None else checked_mode(retries, "retries=")
        self.scrub_payload = scrub_payload
        self._kept = _log_events.RecentKeys(KEPT_ATTEMPTS)

    def __repr__(self) -> str:
        return f"SentryReporter(retries={self.retries!r}, scrub_payload={self.scrub_payload!r})"

    @property
    def retries(self) -> str:
        """The retry mode in force: the one given, else the environment's, else the default."""
        return self._retries or checked_mode(os.environ.get(RETRIES_ENV) or DEFAULT_RETRIES, RETRIES_ENV)

    # -- setup ------------------------------------------------------------------------------

    @sq.hookimpl
    def sqla_queue_configure(self, queue: Any) -> None:
        """Refuse a bad ``$SQLA_QUEUE_SENTRY_RETRIES`` and a second reporter now, not at the
        first failure; make the worker's own failure log line no second Sentry event."""
        self.retries  # noqa: B018 - validates the environment's mode
        reporters = [p for p in queue.plugin_manager.get_plugins() if isinstance(p, SentryReporter)]
        if len(reporters) > 1:
            raise sq.ConfigurationError(
                f"{len(reporters)} Sentry reporters are registered on this Queue, so every failure "
                "would be reported more than once: enable the entry point 'sentry' or pass a "
                "SentryReporter(...) in plugins=, not both"
            )
        _log_events.install()

    # -- run middleware -------------------------------------------------------------------

    @sq.hookimpl
    def sqla_queue_handle_job(self, job: sq.ClaimedJob, ctx: sq.JobContext, call_next: Callable[[], Any]) -> Any:
        if not sentry_sdk.get_client().is_active():
            return call_next()
        if ctx.is_async:
            return self._attempt_async(job, ctx, call_next)
        with self._attempt_scope(job, ctx):
            return call_next()

    async def _attempt_async(self, job: sq.ClaimedJob, ctx: sq.JobContext,
                             call_next: Callable[[], Awaitable[Any]]) -> Any:
        with self._attempt_scope(job, ctx):
            return await call_next()

    @contextmanager
    def _attempt_scope(self, job: sq.ClaimedJob, ctx: sq.JobContext) -> Iterator[Scope]:
        """A fresh isolation scope for one attempt, tagged with the job; kept if it raises."""
        with sentry_sdk.isolation_scope() as scope:
            _describe(scope, job.queue, job.task, job.id, ctx.attempt, ctx.idempotency_key)
            scope.set_context("sqla_queue", {
                "job_id": job.id, "queue": job.queue, "task": job.task, "attempt": ctx.attempt,
                "max_attempts": ctx.max_attempts, "priority": ctx.priority,
            })
            if self.scrub_payload:
                scope.add_event_processor(payload_scrubber(job.payload))
            try:
                yield scope
            except sq.Snooze:
                raise  # no attempt spent, no outcome to report
            except BaseException:
                self._kept.put((job.id, ctx.attempt), scope)
                raise

    # -- outcomes ---------------------------------------------------------------------------

    @sq.hookimpl(tryfirst=True)  # before the built-in logging plugin logs the same outcome
    def sqla_queue_job_retried(self, event: JobRetried) -> None:
        scope = self._kept.pop((event.job_id, event.attempt))
        mode = self.retries
        if mode == "ignore" or not sentry_sdk.get_client().is_active():
            return
        if mode == "breadcrumb":
            sentry_sdk.add_breadcrumb(
                category="sqla_queue.retry", type="error", level="warning",
                message=(f"job {event.job_id} ({event.task} on {event.queue}) failed attempt "
                         f"{event.attempt} with {_type_name(event.exception)}, retrying at "
                         f"{event.run_at.isoformat()}"),
                data={"job_id": event.job_id, "task": event.task, "queue": event.queue,
                      "attempt": event.attempt, "error_type": _type_name(event.exception)},
            )
        else:
            self._report(event, scope, level=mode, outcome="retried")
        _log_events.note_reported(_log_events.outcome_key(event.queue, event.task, event.job_id, event.attempt))

    @sq.hookimpl(tryfirst=True)  # before the built-in logging plugin logs the same outcome
    def sqla_queue_job_failed(self, event: JobFailed) -> None:
        scope = self._kept.pop((event.job_id, event.attempt))
        if not sentry_sdk.get_client().is_active():
            return
        self._report(event, scope, level="error", outcome="failed")
        _log_events.note_reported(_log_events.outcome_key(event.queue, event.task, event.job_id, event.attempt))

    @sq.hookimpl
    def sqla_queue_job_recovered(self, event: JobRecovered) -> None:
        """A job that ran out of attempts because its last lease expired (its worker died or
        hung) failed for good too, with no exception to show."""
        if event.status is not sq.JobStatus.FAILED or not sentry_sdk.get_client().is_active():
            return
        with sentry_sdk.isolation_scope() as scope:
            _describe(scope, event.queue, event.task, event.job_id)
            scope.set_tag(f"{TAG}outcome", "failed")
            scope.fingerprint = ["sqla_queue", event.task, "lease expired"]
            sentry_sdk.capture_message(
                f"job {event.job_id} ({event.task} on {event.queue}) failed for good: the lease "
                "of its last attempt expired", level="error")

    def _report(self, event: JobRetried | JobFailed, kept: Scope | None, *, level: str, outcome: str) -> None:
        with self._outcome_scope(event, kept) as scope:
            scope.set_level(level)
            scope.set_tag(f"{TAG}outcome", outcome)
            scope.fingerprint = ["sqla_queue", event.task, _type_name(event.exception)]
            error = event.exception
            if error is None:  # an outcome recorded from a string: its sanitized text is all there is
                sentry_sdk.capture_message(f"job {event.job_id} ({event.task} on {event.queue}) {outcome}: "
                                           f"{event.error}")
                return
            exc_info = (type(error), error, _from_the_handler(error.__traceback__))
            report, hint = event_from_exception(exc_info, client_options=sentry_sdk.get_client().options,
                                                mechanism={"type": "sqla_queue", "handled": outcome != "failed"})
            sentry_sdk.capture_event(report, hint=hint)

    @contextmanager
    def _outcome_scope(self, event: JobRetried | JobFailed, kept: Scope | None) -> Iterator[Scope]:
        """The attempt's own scope when the middleware kept it, else a new one tagged from the
        event (the idempotency key is not in it) and scrubbed of frame variables."""
        if kept is not None:
            with use_isolation_scope(kept), sentry_sdk.new_scope() as scope:
                yield scope
            return
        with sentry_sdk.isolation_scope() as scope:
            _describe(scope, event.queue, event.task, event.job_id, event.attempt)
            if self.scrub_payload:
                scope.add_event_processor(payload_scrubber(None))
            yield scope


def checked_mode(mode: str, where: str) -> str:
    if mode not in RETRY_MODES:
        raise sq.ConfigurationError(
            f"{where} is {mode!r}: the Sentry plugin's retry mode is one of {', '.join(RETRY_MODES)}"
        )
    return mode


def _describe(scope: Scope, queue: str, task: str, job_id: int, attempt: int | None = None,
              idempotency_key: str | None = None) -> None:
    tags = {"queue": queue, "task": task, "job_id": job_id, "attempt": attempt, "idempotency_key": idempotency_key}
    for name, value in tags.items():
        if value is not None:
            scope.set_tag(f"{TAG}{name}", str(value)[:MAX_TAG_VALUE])


def _type_name(error: BaseException | None) -> str:
    if error is None:
        return "no exception"
    kind = type(error)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _from_the_handler(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from its first frame outside sqla_queue and this plugin (the middleware
    chain's frames come first): the event's stack then ends where the handler failed."""
    start = tb
    while start is not None and _is_library_frame(start) and start.tb_next is not None:
        start = start.tb_next
    return start


def _is_library_frame(tb: TracebackType) -> bool:
    module = tb.tb_frame.f_globals.get("__name__", "")
    return module == "sqla_queue" or module.startswith(("sqla_queue.", "sqla_queue_sentry"))
