"""Operator-facing work on a Queue: health stats, the per-minute history and the workers seen,
listing, reading a job, retry-now and cancel (one job, or many by a filter), pausing and
resuming queues.

`Queue`'s methods of the same names delegate to an `Operations` on the queue's executor, which
gives the table's statements and the transaction modes (with their call deadline), and its
plugin manager, which hears of the jobs a cancel ends.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import fields, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pluggy
from sqlalchemy import Connection

# The event payloads and the reads' types (`types.JobView`, ...) load when first built.
from .. import _validate, types
from ..db.executor import Executor, Statements
from ..errors import DatabaseError, InvalidInputError, JobStateError
from ..plugins.calls import emit
from ..queue_state import QueueLimits
from ..sql import counters as counter_sql
from ..types import ACTIVE_STATUSES, DEFAULT_STATS_WINDOW, FINISHED_STATUSES, JobStatus, QueueState
from .counters import EMPTY_CLAIM_CLASSIFY_INTERVAL  # noqa: F401  (documented as operations.…)

if TYPE_CHECKING:
    from ..reports import BulkResult, HistoryPoint, JobPage, JobView, QueueStats, WorkerInfo, WorkerSeen

MAX_PAGE = 1000
"""The most jobs one `list_jobs` page returns."""
MAX_BULK = 10_000
"""The most jobs one `retry_jobs` or `cancel_jobs` call changes."""
DEFAULT_BULK_LIMIT = 1000
DEFAULT_HISTORY = timedelta(hours=1)
DEFAULT_SAMPLE_RETENTION = timedelta(days=7)
"""How long the per-minute samples behind `history` are kept (`record_sample`)."""
DEFAULT_WORKERS_WITHIN = timedelta(minutes=15)

_KIND_FIELDS = {
    counter_sql.RETRIED: "retried",
    counter_sql.LEASE_RECOVERED: "lease_recoveries",
    counter_sql.EMPTY_LOCKED: "empty_claims_locked",
    counter_sql.EMPTY_SCHEDULED: "empty_claims_scheduled",
    counter_sql.EMPTY_EXHAUSTED: "empty_claims_exhausted",
    counter_sql.EMPTY_OTHER_QUEUE: "empty_claims_other_queue",
    counter_sql.THROTTLED: "throttled",
}
_VIEW_COLUMNS = {"queue": "queue_name"}


def _job_page(rows: list[Any], limit: int) -> JobPage:
    jobs = [job_view(row) for row in rows[:limit]]
    return types.JobPage(jobs=jobs, next_before=jobs[-1].id if len(rows) > limit else None)


def job_view(row: Any) -> JobView:
    """A job row (every column `JobView` names; the queue as ``queue_name``) as a `JobView`."""
    values = {f.name: getattr(row, _VIEW_COLUMNS.get(f.name, f.name)) for f in fields(types.JobView)}
    values["status"] = JobStatus(values["status"])
    return types.JobView(**values)


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
        with self.executor.transaction() as conn:
            return self.read_stats(window, conn)

    async def stats_async(self, window: timedelta | float, session: Any, connection: Any) -> QueueStats:
        window = _validate.duration(window, "window", positive=True)
        return await self.executor.run_async(lambda conn, _fast: self.read_stats(window, conn), session, connection)

    def read_stats(self, window: timedelta, conn: Connection) -> QueueStats:
        """`stats` inside the transaction of `conn` (either face's)."""
        s = self.statements
        params = {"window": window}
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
        for row in conn.execute(s.all_limits).all():
            signals[row.queue_name]["limits"] = QueueLimits.from_row(row)
        healths = {name: types.QueueHealth(queue=name, **values) for name, values in sorted(signals.items())}
        return types.QueueStats(
            queues={name: h for name, h in healths.items() if name in with_jobs},
            idle={name: h for name, h in healths.items() if name not in with_jobs},
            window=window,
            measured_at=measured_at,
        )

    def get_job(self, job_id: int) -> JobView | None:
        job_id = _validate.job_id(job_id)
        with self.executor.connection() as conn:
            return self.read_job(job_id, conn)

    async def get_job_async(self, job_id: int, session: Any, connection: Any) -> JobView | None:
        job_id = _validate.job_id(job_id)
        return await self.executor.run_async(lambda conn, _fast: self.read_job(job_id, conn), session, connection)

    def read_job(self, job_id: int, conn: Connection) -> JobView | None:
        row = conn.execute(self.statements.select_job, {"job_id": job_id}).first()
        return None if row is None else job_view(row)

    def list_jobs(self, **filters: Any) -> JobPage:
        """A page of jobs, newest first, filtered by status, queue, task and creation time
        (``created_after <= created_at < created_before``; all optional)."""
        statement, params, limit = self._job_page_query(**filters)
        with self.executor.connection() as conn:
            return _job_page(conn.execute(statement, params).all(), limit)

    async def list_jobs_async(self, session: Any, connection: Any, **filters: Any) -> JobPage:
        statement, params, limit = self._job_page_query(**filters)
        rows = await self.executor.run_async(lambda conn, _fast: conn.execute(statement, params).all(),
                                             session, connection)
        return _job_page(rows, limit)

    def _job_page_query(
        self,
        *,
        status: JobStatus | str | None = None,
        queue_name: str | None = None,
        task: str | None = None,
        limit: int = 50,
        before_id: int | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
    ) -> tuple[Any, dict[str, Any], int]:
        """The checked filters of `list_jobs` as (statement, params, page size)."""
        status = _status(status)
        limit = _page_size(limit)
        params: dict[str, Any] = {"limit": limit + 1}
        if queue_name is not None:
            params["queue"] = _validate.name(queue_name, "queue")
        if task is not None:
            params["task"] = _validate.name(task, "task")
        if before_id is not None:
            params["before_id"] = _validate.job_id(before_id, "before_id")
        for bound, value in (("created_after", created_after), ("created_before", created_before)):
            if value is not None:
                params[bound] = _validate.aware_datetime(value, bound)
        statement = self.statements.list_jobs(status, queue_name is not None, task is not None,
                                               before_id is not None, created_after is not None,
                                               created_before is not None)
        return statement, params, limit

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
            self._emit_cancelled(view)
        return view

    def _emit_cancelled(self, view: JobView) -> None:
        """Tell plugins that an operator's cancel ended pending job `view`."""
        emit(self.plugin_manager, "sqla_queue_job_cancelled", event=types.JobCancelled(
            job_id=view.id, queue=view.queue, task=view.task, attempt=view.attempts,
            requested_while_running=False,
        ))

    # -- many jobs at once -------------------------------------------------------------

    def retry_jobs(self, *, queue_name: str | None = None, task: str | None = None,
                   job_ids: Iterable[int] | None = None, limit: int = DEFAULT_BULK_LIMIT) -> BulkResult:
        """`retry_now` for up to `limit` failed jobs (lowest ids first) of `queue_name`, of
        `task` and among `job_ids` (each filter optional), in one statement. Jobs another
        transaction holds, jobs whose idempotency key an active job holds, and matching jobs
        beyond `limit` are left alone and counted in ``skipped``."""
        statuses = (JobStatus.FAILED,)
        flags, params = _bulk_filter(queue_name, task, job_ids, limit)
        try:
            return self._bulk("retry", statuses, self.statements.retry_jobs(**flags), flags, params)
        except DatabaseError as exc:
            if _sqlstate(exc) == "23505":  # an enqueue took a key between our check and update
                raise JobStateError("an idempotency key of a job being retried was just taken by a new "
                                    "active job; nothing was retried, try again") from None
            raise

    def cancel_jobs(self, *, status: JobStatus | str | None = None, queue_name: str | None = None,
                    task: str | None = None, job_ids: Iterable[int] | None = None,
                    limit: int = DEFAULT_BULK_LIMIT) -> BulkResult:
        """`cancel` for up to `limit` active jobs (lowest ids first): pending ones end cancelled,
        running ones get a cancel request (``cancel_requested``). `status` (pending or running;
        default both), `queue_name`, `task` and `job_ids` filter them; at least one is needed.
        Jobs another transaction holds, and matching jobs beyond `limit`, are counted in
        ``skipped``."""
        statuses = _active_statuses(status)
        if status is None and queue_name is None and task is None and job_ids is None:
            raise InvalidInputError("cancel_jobs needs a filter (status, queue_name, task or job_ids): "
                                    "it will not cancel every active job unasked")
        flags, params = _bulk_filter(queue_name, task, job_ids, limit)
        return self._bulk("cancel", statuses, self.statements.cancel_jobs(statuses, **flags), flags, params)

    def _bulk(self, action: str, statuses: tuple[JobStatus, ...], statement: Any, flags: dict[str, bool],
              params: dict[str, Any]) -> BulkResult:
        """Count what the filter matches, then change what is free, in one transaction."""
        with self.executor.transaction() as conn:
            matching = conn.execute(self.statements.count_matching(statuses, **flags), params).scalar_one()
            views = [job_view(row) for row in conn.execute(statement, params).all()]
        views.sort(key=lambda view: view.id)
        for view in views:
            if view.status is JobStatus.CANCELLED:
                self._emit_cancelled(view)
        requested = tuple(v.id for v in views if action == "cancel" and v.status is JobStatus.RUNNING)
        return types.BulkResult(action=action, changed=tuple(v.id for v in views),
                                skipped=max(0, matching - len(views)), cancel_requested=requested)

    # -- history and workers ------------------------------------------------------------

    def record_sample(self, retention: timedelta | float = DEFAULT_SAMPLE_RETENTION) -> int:
        """Write the last minute's sample of every queue unless a worker already did, and then
        delete samples older than `retention`; returns the rows written (0: nothing to write,
        or written already). One statement (`sql.samples.record_sample`)."""
        params = {"retention": _validate.duration(retention, "retention", positive=True)}
        with self.executor.single_statement() as conn:
            return int(conn.execute(self.statements.record_sample, params).one().written)

    def history(self, since: timedelta | float = DEFAULT_HISTORY, queue_name: str | None = None) -> list[HistoryPoint]:
        """The samples of the minutes since `since` ago, in (minute, queue) order."""
        params: dict[str, Any] = {"since": _validate.duration(since, "since", positive=True)}
        statement = self.statements.history
        if queue_name is not None:
            params["queue"] = _validate.name(queue_name, "queue")
            statement = self.statements.queue_history
        with self.executor.connection() as conn:
            rows = conn.execute(statement, params).all()
        return [_history_point(row) for row in rows]

    def workers_seen(self, within: timedelta | float = DEFAULT_WORKERS_WITHIN) -> list[WorkerSeen]:
        """Workers holding jobs now, or that finished one within `within`, most recent first."""
        params = {"within": _validate.duration(within, "within", positive=True)}
        with self.executor.connection() as conn:
            rows = conn.execute(self.statements.workers_seen, params).all()
        return [types.WorkerSeen(worker_id=row.worker_id, last_seen=row.last_seen, queues=tuple(row.queues),
                                 running_job_ids=tuple(row.running_job_ids), finished_recently=row.finished_recently)
                for row in rows]

    def workers(self, include_dead: bool = True) -> list[WorkerInfo]:
        """The worker registry: live workers first, then dead ones (unless not `include_dead`),
        each by start time."""
        with self.executor.connection() as conn:
            rows = conn.execute(self.statements.list_workers).all()
        found = [worker_info(row) for row in rows]
        return found if include_dead else [w for w in found if w.alive]

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

    def list_queues(self, limits: dict[str, QueueLimits] | None = None) -> list[QueueState]:
        """Every queue with active jobs, a pause row or `limits` (by queue name), by name."""
        with self.executor.connection() as conn:
            states = {row.queue_name: _queue_state(row) for row in conn.execute(self.statements.queue_states).all()}
        for name, found in (limits or {}).items():
            state = states.get(name) or QueueState(name=name, paused=False, paused_at=None, pending=0, running=0)
            states[name] = replace(state, limits=found)
        return [states[name] for name in sorted(states)]


def worker_info(row: Any) -> WorkerInfo:
    """A row of `sql.workers.list_workers` as a `WorkerInfo`."""
    return types.WorkerInfo(
        worker_id=row.id, host=row.host, pid=row.pid, version=row.version, queues=tuple(row.queues),
        tasks=tuple(row.tasks), concurrency=row.concurrency, state=row.state, started_at=row.started_at,
        heartbeat_at=row.heartbeat_at, expires_at=row.expires_at, alive=bool(row.alive),
        status=row.state if row.alive else "dead", running_job_ids=tuple(row.running_job_ids or ()),
        measured_at=row.now,
    )


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


def _active_statuses(value: Any) -> tuple[JobStatus, ...]:
    """What a bulk cancel acts on: pending, running, or (None) both."""
    status = _status(value)
    if status is None:
        return ACTIVE_STATUSES
    if status not in ACTIVE_STATUSES:
        raise InvalidInputError(f"only pending or running jobs can be cancelled, got status {status.value!r}")
    return (status,)


def _bulk_filter(queue_name: Any, task: Any, job_ids: Any, limit: Any) -> tuple[dict[str, bool], dict[str, Any]]:
    """A bulk action's filter, checked: which filters are given, and their parameters."""
    limit = _validate.positive_int(limit, "limit")
    if limit > MAX_BULK:
        raise InvalidInputError(f"limit must be at most {MAX_BULK}, got {limit}")
    params: dict[str, Any] = {"limit": limit}
    if queue_name is not None:
        params["queue"] = _validate.name(queue_name, "queue")
    if task is not None:
        params["task_name"] = _validate.name(task, "task")
    if job_ids is not None:
        if isinstance(job_ids, (str, bytes)) or not isinstance(job_ids, Iterable):
            raise InvalidInputError(f"job_ids must be a list of job ids, got {type(job_ids).__name__}")
        params["job_ids"] = sorted({_validate.job_id(job_id) for job_id in job_ids})
    flags = {"by_queue": queue_name is not None, "by_task": task is not None, "by_ids": job_ids is not None}
    return flags, params


def _history_point(row: Any) -> HistoryPoint:
    values = {f.name: getattr(row, _HISTORY_COLUMNS.get(f.name, f.name)) for f in fields(types.HistoryPoint)}
    return types.HistoryPoint(**values)


_HISTORY_COLUMNS = {"at": "bucket", "queue": "queue_name"}


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
