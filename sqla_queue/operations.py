"""Operator-facing work on a Queue: health stats, listing, reading a job, retry-now, cancel,
pausing and resuming queues.

`Queue`'s methods of the same names delegate to an `Operations` on the queue's executor, which
gives the table's statements and the transaction modes (with their call deadline), and its
plugin manager, which hears of the jobs a cancel ends.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import fields
from typing import TYPE_CHECKING, Any

import pluggy
from sqlalchemy import Connection

from . import _validate
from ._plugins import emit
from ._counters import EMPTY_CLAIM_CLASSIFY_INTERVAL  # noqa: F401  (documented as operations.…)
from ._executor import Executor, Statements
from .errors import DatabaseError, InvalidInputError, JobStateError
from .sql import counters as counter_sql
from .types import (
    DEFAULT_STATS_WINDOW,
    FINISHED_STATUSES,
    JobCancelled,
    JobPage,
    JobStatus,
    JobView,
    QueueHealth,
    QueueState,
    QueueStats,
)

if TYPE_CHECKING:
    from datetime import timedelta

MAX_PAGE = 1000
"""The most jobs one `list_jobs` page returns."""

_KIND_FIELDS = {
    counter_sql.RETRIED: "retried",
    counter_sql.LEASE_RECOVERED: "lease_recoveries",
    counter_sql.EMPTY_LOCKED: "empty_claims_locked",
    counter_sql.EMPTY_SCHEDULED: "empty_claims_scheduled",
    counter_sql.EMPTY_EXHAUSTED: "empty_claims_exhausted",
    counter_sql.EMPTY_OTHER_QUEUE: "empty_claims_other_queue",
}
_VIEW_COLUMNS = {"queue": "queue_name"}


def job_view(row: Any) -> JobView:
    """A job row (every column `JobView` names; the queue as ``queue_name``) as a `JobView`."""
    values = {f.name: getattr(row, _VIEW_COLUMNS.get(f.name, f.name)) for f in fields(JobView)}
    values["status"] = JobStatus(values["status"])
    return JobView(**values)


class Operations:
    """An operator's reads and writes on `executor`'s table."""

    def __init__(self, executor: Executor, plugin_manager: pluggy.PluginManager) -> None:
        self.executor = executor
        self.statements = executor.statements
        self.plugin_manager = plugin_manager

    def stats(self, window: timedelta | float = DEFAULT_STATS_WINDOW) -> QueueStats:
        """Every health signal per queue: active jobs now, finished jobs and events in `window`.

        One transaction, so every windowed statement ends at the same ``now()``. Each statement
        is served by one index and none reads finished jobs outside the window (see sql/stats.py).
        A paused queue is listed with the queues that have jobs, even when it has none.
        """
        window = _validate.duration(window, "window", positive=True)
        s = self.statements
        params = {"window": window}
        with self.executor.transaction() as conn:
            measured_at = conn.execute(s.now).scalar_one()
            sources = [conn.execute(statement, params).all()
                       for statement in (s.health, s.completed_in_window, s.failed_in_window,
                                         s.cancelled_in_window, s.paused_queues)]
            counted = conn.execute(s.counted_in_window, params).all()
        signals: dict[str, dict[str, Any]] = defaultdict(dict)
        for rows in sources:
            for row in rows:
                values = dict(row._mapping)
                signals[values.pop("queue_name")].update(values)
        with_jobs = set(signals)
        for row in counted:
            if row.kind in _KIND_FIELDS:
                signals[row.queue_name][_KIND_FIELDS[row.kind]] = row.events
        healths = {name: QueueHealth(queue=name, **values) for name, values in sorted(signals.items())}
        return QueueStats(
            queues={name: h for name, h in healths.items() if name in with_jobs},
            idle={name: h for name, h in healths.items() if name not in with_jobs},
            window=window,
            measured_at=measured_at,
        )

    def get_job(self, job_id: int) -> JobView | None:
        with self.executor.connection() as conn:
            row = conn.execute(self.statements.select_job, {"job_id": _validate.job_id(job_id)}).first()
        return None if row is None else job_view(row)

    def list_jobs(
        self,
        *,
        status: JobStatus | str | None = None,
        queue_name: str | None = None,
        task: str | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> JobPage:
        """A page of jobs, newest first, filtered by status, queue and task (all optional)."""
        status = _status(status)
        limit = _page_size(limit)
        params: dict[str, Any] = {"limit": limit + 1}
        if queue_name is not None:
            params["queue"] = _validate.name(queue_name, "queue")
        if task is not None:
            params["task"] = _validate.name(task, "task")
        if before_id is not None:
            params["before_id"] = _validate.job_id(before_id, "before_id")
        statement = self.statements.list_jobs(status, queue_name is not None, task is not None,
                                               before_id is not None)
        with self.executor.connection() as conn:
            rows = conn.execute(statement, params).all()
        jobs = [job_view(row) for row in rows[:limit]]
        return JobPage(jobs=jobs, next_before=jobs[-1].id if len(rows) > limit else None)

    def retry_now(self, job_id: int) -> JobView:
        """Make failed job `job_id` pending and due now, with at least one attempt left.

        Raises `InvalidInputError` for an id no job has, and `JobStateError` when the job is
        not failed, another transaction holds its row, or an active job now holds its
        idempotency key.
        """
        job_id = _validate.job_id(job_id)
        s = self.statements
        try:
            with self.executor.transaction() as conn:
                row = conn.execute(s.retry_failed, {"job_id": job_id}).first()
                if row is None:
                    raise _refusal(conn, s, job_id, JobStatus.FAILED, "retried")
        except DatabaseError as exc:
            if _sqlstate(exc) == "23505":  # an enqueue took the key between our check and update
                raise JobStateError(f"job {job_id}'s idempotency key was just taken by a new active job") from None
            raise
        return job_view(row)

    def cancel(self, job_id: int) -> JobView:
        """Cancel pending job `job_id`, or ask its worker to stop running job `job_id`; returns
        the job's new state (``cancelled``, or ``running`` with ``cancel_requested_at`` set).

        Raises `InvalidInputError` for an id no job has, and `JobStateError` when the job has
        finished (completed, failed or cancelled) or a transaction holds its row now.
        """
        job_id = _validate.job_id(job_id)
        s = self.statements
        with self.executor.transaction() as conn:
            row = conn.execute(s.cancel, {"job_id": job_id}).first()
            if row is None:
                raise _cancel_refusal(conn, s, job_id)
        view = job_view(row)
        if view.status is JobStatus.CANCELLED:
            emit(self.plugin_manager, "sqla_queue_job_cancelled", event=JobCancelled(
                job_id=view.id, queue=view.queue, task=view.task, attempt=view.attempts,
                requested_while_running=False,
            ))
        return view

    # -- queue control -------------------------------------------------------------------

    def pause(self, queue_name: str) -> QueueState:
        """Stop every worker claiming from `queue_name`; it stays paused until `resume`."""
        return self._set_pause(self.statements.pause, queue_name)

    def resume(self, queue_name: str) -> QueueState:
        """Let workers claim from `queue_name` again (a queue that was not paused stays so)."""
        return self._set_pause(self.statements.resume, queue_name)

    def _set_pause(self, statement: Any, queue_name: str) -> QueueState:
        """Pause or resume, then read the queue's state in the same transaction."""
        params = {"queue": _validate.name(queue_name, "queue")}
        with self.executor.transaction() as conn:
            conn.execute(statement, params)
            row = conn.execute(self.statements.queue_state, params).first()
        if row is None:  # resumed a queue with no jobs that was never paused
            return QueueState(name=queue_name, paused=False, paused_at=None, pending=0, running=0)
        return _queue_state(row)

    def list_queues(self) -> list[QueueState]:
        """Every queue with active jobs or a pause row, by name."""
        with self.executor.connection() as conn:
            return [_queue_state(row) for row in conn.execute(self.statements.queue_states).all()]


def _queue_state(row: Any) -> QueueState:
    return QueueState(name=row.queue_name, paused=row.paused_at is not None, paused_at=row.paused_at,
                      pending=row.pending, running=row.running)


def _status(value: Any) -> JobStatus | None:
    if value is None or isinstance(value, JobStatus):
        return value
    try:
        return JobStatus(value)
    except ValueError:
        names = ", ".join(s.value for s in JobStatus)
        raise InvalidInputError(f"unknown status {value!r}; expected one of {names}") from None


def _page_size(value: Any) -> int:
    value = _validate.positive_int(value, "limit")
    if value > MAX_PAGE:
        raise InvalidInputError(f"limit must be at most {MAX_PAGE}, got {value}")
    return value


def _refusal(conn: Connection, s: Statements, job_id: int, needed: JobStatus, action: str) -> Exception:
    """Why an operator write matched no row: no such job, wrong state, key taken, or busy."""
    state = conn.execute(s.job_state, {"job_id": job_id}).first()
    if state is None:
        return InvalidInputError(f"job {job_id} does not exist")
    if state.status != needed.value:
        return JobStateError(f"job {job_id} is {state.status}: only {needed.value} jobs can be {action}")
    if state.idempotency_key is not None:
        holder = conn.execute(s.key_holder, {"key": state.idempotency_key}).scalar()
        if holder is not None:
            return JobStateError(
                f"job {job_id}'s idempotency key is held by active job {holder}: retrying it "
                "would run the same work twice"
            )
    return JobStateError(f"job {job_id} is locked by another transaction right now; try again")


def _cancel_refusal(conn: Connection, s: Statements, job_id: int) -> Exception:
    """Why a cancel matched no row: no such job, a finished one, or a row someone holds."""
    state = conn.execute(s.job_state, {"job_id": job_id}).first()
    if state is None:
        return InvalidInputError(f"job {job_id} does not exist")
    if state.status in {status.value for status in FINISHED_STATUSES}:
        return JobStateError(f"job {job_id} is {state.status}: only pending or running jobs can be cancelled")
    return JobStateError(f"job {job_id} is locked by another transaction right now; try again")


def _sqlstate(exc: DatabaseError) -> str | None:
    orig = getattr(exc, "orig", None)
    return getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
