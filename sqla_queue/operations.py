"""Operator-facing work on a Queue: health stats, event counters, listing, retry-now, cancel.

`Queue`'s methods of the same names are thin delegators to these functions, which take the
Queue for its table, its connections (with their call deadline) and nothing else. Statements
come from `sqla_queue.sql`, built once per table.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import fields
from functools import lru_cache
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Table

from . import _validate
from .errors import DatabaseError, InvalidInputError, JobStateError
from .models import counters_table
from .sql import counters as counter_sql
from .sql import operator_actions as ops_sql
from .sql import stats as stats_sql
from .types import DEFAULT_STATS_WINDOW, JobPage, JobStatus, JobView, QueueHealth, QueueStats

if TYPE_CHECKING:
    from datetime import timedelta

    from .queue import Queue

MAX_PAGE = 1000
"""The most jobs one `list_jobs` page returns."""

EMPTY_CLAIM_CLASSIFY_INTERVAL = 1.0
"""Seconds between two classifications of empty claims on one queue, per Queue object."""

_KIND_FIELDS = {
    counter_sql.RETRIED: "retried",
    counter_sql.LEASE_RECOVERED: "lease_recoveries",
    counter_sql.EMPTY_LOCKED: "empty_claims_locked",
    counter_sql.EMPTY_SCHEDULED: "empty_claims_scheduled",
    counter_sql.EMPTY_EXHAUSTED: "empty_claims_exhausted",
    counter_sql.EMPTY_OTHER_QUEUE: "empty_claims_other_queue",
}
_VIEW_COLUMNS = {"queue": "queue_name"}


@lru_cache(maxsize=64)
def _statements(table: Table) -> SimpleNamespace:
    counters = counters_table(table)
    return SimpleNamespace(
        now=stats_sql.database_now(),
        health=stats_sql.queue_health(table),
        completed=stats_sql.completed_in_window(table),
        failed=stats_sql.failed_in_window(table),
        counted=stats_sql.counted_in_window(counters),
        count_events=counter_sql.count_events(counters),
        count_empty=counter_sql.count_empty_claim(table, counters),
        job_state=ops_sql.job_state(table),
        key_holder=ops_sql.active_key_holder(table),
        retry=ops_sql.retry_failed_job(table),
        cancel=ops_sql.cancel_pending_job(table),
    )


@lru_cache(maxsize=256)
def _list_statement(table: Table, status: JobStatus | None, by_queue: bool, by_task: bool, paged: bool):
    return ops_sql.list_jobs(table, status=status, by_queue=by_queue, by_task=by_task, paged=paged)


# -- stats -------------------------------------------------------------------------------


def queue_stats(queue: Queue, window: timedelta | float = DEFAULT_STATS_WINDOW) -> QueueStats:
    """Every health signal per queue: active jobs now, finished jobs and events in `window`.

    One transaction, so every windowed statement ends at the same ``now()``. Each statement is
    served by one index and none reads finished jobs outside the window (see sql/stats.py).
    """
    window = _validate.duration(window, "window", positive=True)
    s = _statements(queue.table)
    params = {"window": window}
    with queue._transaction() as conn:
        measured_at = conn.execute(s.now).scalar_one()
        sources = [conn.execute(statement, params).all() for statement in (s.health, s.completed, s.failed)]
        counted = conn.execute(s.counted, params).all()
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


# -- counting, inside the transaction of the event -------------------------------------


class EmptyClaimThrottle:
    """At most one classification of empty claims per queue name every `interval` seconds.

    A worker serving a busy queue and an idle one claims the idle one on every round; counting
    each of those would add a round trip, and a write to one hot counter row, per round while
    jobs flow. Empty claims in between are tallied here and added to the next count, under the
    reason found then. The tally is per process: one that exits drops at most `interval`
    seconds of it.
    """

    def __init__(self, interval: float = EMPTY_CLAIM_CLASSIFY_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._state: dict[str, tuple[float, int]] = {}

    def due(self, queue_name: str) -> int | None:
        """The number of empty claims to count now (this one included), or None to tally it."""
        with self._lock:
            now = self._clock()
            last, tallied = self._state.get(queue_name, (None, 0))
            if last is not None and now - last < self.interval:
                self._state[queue_name] = (last, tallied + 1)
                return None
            self._state[queue_name] = (now, 0)
            return tallied + 1


def empty_claim_throttle(queue: Queue) -> EmptyClaimThrottle:
    """The Queue's throttle, created on first use (a worker's bound copy shares it)."""
    return queue.__dict__.setdefault("_empty_claim_throttle", EmptyClaimThrottle())


def count_empty_claim(queue: Queue, conn: Connection, queue_name: str) -> str | None:
    """Classify and count an empty claim on `queue_name` in the claim's own transaction.

    Returns the reason, or None when nothing was pending anywhere (nothing is written) or this
    claim was only tallied (see `EmptyClaimThrottle`).
    """
    events = empty_claim_throttle(queue).due(queue_name)
    if events is None:
        return None
    params = {"queue": queue_name, "events": events}
    return conn.execute(_statements(queue.table).count_empty, params).scalar()


def count_retry(queue: Queue, conn: Connection, row: Any) -> None:
    """Count an outcome row that sent its job back to pending (a retry), unless it is the replay
    of a retry already counted."""
    if row is None or getattr(row, "replayed", False) or getattr(row, "status", None) != JobStatus.PENDING.value:
        return
    _count(queue, conn, counter_sql.RETRIED, [row.queue_name])


def count_recovered(queue: Queue, conn: Connection, rows: Iterable[Any]) -> None:
    """Count jobs taken back from expired leases, one upsert per queue they belong to."""
    _count(queue, conn, counter_sql.LEASE_RECOVERED, [row.queue_name for row in rows])


def _count(queue: Queue, conn: Connection, kind: str, queue_names: list[str]) -> None:
    per_queue = Counter(queue_names)
    if per_queue:
        params = [{"queue": name, "kind": kind, "events": n} for name, n in sorted(per_queue.items())]
        conn.execute(_statements(queue.table).count_events, params)


# -- listing -----------------------------------------------------------------------------


def list_jobs(
    queue: Queue,
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
        params["before_id"] = job_id_arg(before_id, "before_id")
    statement = _list_statement(queue.table, status, queue_name is not None, task is not None,
                                before_id is not None)
    with queue._connection() as conn:
        rows = conn.execute(statement, params).all()
    jobs = [job_view(row) for row in rows[:limit]]
    return JobPage(jobs=jobs, next_before=jobs[-1].id if len(rows) > limit else None)


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


def job_id_arg(value: Any, what: str = "job_id") -> int:
    """A job id as the API accepts it: a positive integer (ids start at 1), bool excluded."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{what} must be an integer, got {type(value).__name__}")
    if value < 1:
        raise InvalidInputError(f"{what} must be a positive integer, got {value}")
    return value


def job_view(row: Any) -> JobView:
    values = {f.name: getattr(row, _VIEW_COLUMNS.get(f.name, f.name)) for f in fields(JobView)}
    values["status"] = JobStatus(values["status"])
    return JobView(**values)


# -- operator writes ---------------------------------------------------------------------


def retry_now(queue: Queue, job_id: int) -> JobView:
    """Make failed job `job_id` pending and due now, with at least one attempt left.

    Raises `InvalidInputError` for an id no job has, and `JobStateError` when the job is not
    failed, another transaction holds its row, or an active job now holds its idempotency key.
    """
    job_id = job_id_arg(job_id)
    s = _statements(queue.table)
    try:
        with queue._transaction() as conn:
            row = conn.execute(s.retry, {"job_id": job_id}).first()
            if row is None:
                raise _refusal(conn, s, job_id, JobStatus.FAILED, "retried")
    except DatabaseError as exc:
        if _sqlstate(exc) == "23505":  # an enqueue took the key between our check and update
            raise JobStateError(f"job {job_id}'s idempotency key was just taken by a new active job") from None
        raise
    return job_view(row)


def cancel(queue: Queue, job_id: int) -> JobView:
    """Delete pending job `job_id` and return its last state.

    Raises `InvalidInputError` for an id no job has, and `JobStateError` when the job is not
    pending (a running job belongs to its worker) or a transaction holds its row right now.
    """
    job_id = job_id_arg(job_id)
    s = _statements(queue.table)
    with queue._transaction() as conn:
        row = conn.execute(s.cancel, {"job_id": job_id}).first()
        if row is None:
            raise _refusal(conn, s, job_id, JobStatus.PENDING, "cancelled")
    return job_view(row)


def _refusal(conn: Connection, s: SimpleNamespace, job_id: int, needed: JobStatus, action: str) -> Exception:
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


def _sqlstate(exc: DatabaseError) -> str | None:
    orig = getattr(exc, "orig", None)
    return getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
