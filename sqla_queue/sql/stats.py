"""Health-signal reads, one statement per source, each served by one index.

The job table of a busy queue is mostly finished jobs, so no statement here may read all of
them: the active aggregate reads only pending and running rows, and every windowed statement is
a range scan on a finished-time (or counter bucket) index. Which index serves which statement is
proved by EXPLAIN in tests/sql/test_operations_plans.py and listed in docs/how-to/operations.md.

Window bounds use ``now()``, not ``clock_timestamp()``: a volatile function cannot bound an index
scan, and ``now()`` (the transaction's start) keeps every statement of one `stats()` call on the
same window.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Integer,
    Interval,
    Table,
    bindparam,
    cast,
    func,
    literal_column,
    null,
    select,
    union_all,
)
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.sql import Executable, Select

from ..types import JobStatus
from ._predicates import status_is, status_is_one_of


def _count_where(condition: ColumnElement[bool]) -> ColumnElement[int]:
    return cast(func.count().filter(condition), Integer)


def queue_health(table: Table) -> Select:
    """Active jobs per queue: counts, eligible vs scheduled, oldest eligible age, near the limit,
    and jobs waiting for their dependencies.

    The active states are asked for one by one (``status = 'waiting' OR status = 'pending' OR
    status = 'running'``), each the predicate of a partial index (waiting, pending claim, running
    expiry), so the planner reads those (every active row, none finished) instead of the table.
    "Eligible" repeats the claim's predicate: due now (database time) with attempts left.
    """
    now = func.clock_timestamp()
    pending = status_is(table, JobStatus.PENDING)
    pending_or_running = status_is(table, JobStatus.PENDING, JobStatus.RUNNING)
    eligible = pending & (table.c.run_at <= now) & (table.c.attempts < table.c.max_attempts)
    return (
        select(
            table.c.queue_name,
            _count_where(pending).label("pending"),
            _count_where(status_is(table, JobStatus.RUNNING)).label("running"),
            _count_where(eligible).label("eligible"),
            _count_where(pending & (table.c.run_at > now)).label("scheduled"),
            (now - func.min(table.c.run_at).filter(eligible)).label("oldest_eligible_age"),
            _count_where(pending_or_running & (table.c.attempts >= table.c.max_attempts - 1))
            .label("near_max_attempts"),
            _count_where(status_is(table, JobStatus.WAITING)).label("waiting"),
        )
        .where(status_is_one_of(table, JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING))
        .group_by(table.c.queue_name)
        .order_by(table.c.queue_name)
    )


def completed_in_window(table: Table) -> Select:
    """Jobs completed in the last ``:window`` per queue, with claim-to-completion percentiles.

    ``locked_at`` stays on a completed row (the claim time of its final attempt), so the
    duration is the last attempt's, queue wait excluded. A range scan on the completed-at index.
    """
    return completed_between(table, window_start())


def completed_between(table: Table, start: ColumnElement, end: ColumnElement | None = None) -> Select:
    """`completed_in_window` for completions at or after `start` and (if given) before `end`:
    the statement a minute's sample reads (`samples.record_sample`)."""
    duration = table.c.completed_at - table.c.locked_at
    return (
        select(
            table.c.queue_name,
            cast(func.count(), Integer).label("completed"),
            func.percentile_cont(0.5).within_group(duration).label("duration_p50"),
            func.percentile_cont(0.95).within_group(duration).label("duration_p95"),
            func.max(duration).label("duration_max"),
        )
        .where(status_is(table, JobStatus.COMPLETED), *_between(table.c.completed_at, start, end))
        .group_by(table.c.queue_name)
    )


def failed_in_window(table: Table) -> Select:
    """Terminal failures in the last ``:window`` per queue: a range scan on the failed-at index."""
    return failed_between(table, window_start())


def failed_between(table: Table, start: ColumnElement, end: ColumnElement | None = None) -> Select:
    """`failed_in_window` for failures at or after `start` and (if given) before `end`."""
    return (
        select(table.c.queue_name, cast(func.count(), Integer).label("failed"))
        .where(status_is(table, JobStatus.FAILED), *_between(table.c.failed_at, start, end))
        .group_by(table.c.queue_name)
    )


def cancelled_in_window(table: Table) -> Select:
    """Jobs cancelled in the last ``:window`` per queue: a range scan on the cancelled-at index.

    A running job whose cancel was requested counts once it ended cancelled, by that time."""
    return (
        select(table.c.queue_name, cast(func.count(), Integer).label("cancelled"))
        .where(status_is(table, JobStatus.CANCELLED), *_between(table.c.cancelled_at, window_start()))
        .group_by(table.c.queue_name)
    )


def counted_in_window(counters: Table) -> Select:
    """Counter totals per queue and kind since the minute ``:window`` ago began.

    Counters have minute resolution, so the window is widened to whole minutes (by less than
    one). A range scan on the counters' primary key, which leads with the bucket.
    """
    return counted_between(counters, func.date_trunc("minute", window_start()))


def counted_between(counters: Table, start: ColumnElement, end: ColumnElement | None = None) -> Select:
    """`counted_in_window` for the minutes from `start` and (if given) before `end`."""
    return (
        select(
            counters.c.queue_name,
            counters.c.kind,
            cast(func.sum(counters.c.events), Integer).label("events"),
        )
        .where(*_between(counters.c.bucket, start, end))
        .group_by(counters.c.queue_name, counters.c.kind)
    )


def window_start() -> ColumnElement:
    """The start of the last ``:window``: ``now()`` (the transaction's start) minus it."""
    return func.now() - bindparam("window", type_=Interval)


def _between(column: ColumnElement, start: ColumnElement, end: ColumnElement | None = None) -> list[ColumnElement[bool]]:
    """``start <= column < end``, as index range bounds (`end` None: no upper bound)."""
    return [column >= start] if end is None else [column >= start, column < end]


def workers_seen(table: Table) -> Select:
    """The workers that hold jobs now or finished one in the last ``:within``, by ``locked_by``.

    A claim writes its worker id into ``locked_by`` and every lease renewal moves ``locked_at``
    on, so a running job says who holds it and when that worker was last heard of; a finished
    job keeps the ``locked_by`` of the claim that finished it. Running jobs are read through
    the running-expiry index (only running rows), finished ones as ranges on the completed-,
    failed- and cancelled-at indexes, so the cost follows the jobs finished in ``:within``,
    never the size of the table. Newest first.
    """
    parts = union_all(
        _seen(table, JobStatus.RUNNING, table.c.locked_at, running=True),
        _seen(table, JobStatus.COMPLETED, table.c.completed_at),
        _seen(table, JobStatus.FAILED, table.c.failed_at),
        _seen(table, JobStatus.CANCELLED, table.c.cancelled_at),
    ).subquery("seen")
    last_seen = func.max(parts.c.seen)
    running_ids = func.array_agg(aggregate_order_by(parts.c.running_id, parts.c.running_id))
    return (
        select(
            parts.c.worker_id,
            last_seen.label("last_seen"),
            func.array_agg(aggregate_order_by(parts.c.queue_name.distinct(), parts.c.queue_name)).label("queues"),
            func.array_remove(running_ids, null()).label("running_job_ids"),
            cast(func.sum(parts.c.finished), Integer).label("finished_recently"),
        )
        .group_by(parts.c.worker_id)
        .order_by(last_seen.desc(), parts.c.worker_id)
    )


def _seen(table: Table, status: JobStatus, seen: ColumnElement, *, running: bool = False) -> Select:
    """One source of `workers_seen`: jobs in `status` with a worker, when it was seen with them."""
    conditions = [status_is(table, status), table.c.locked_by.is_not(None)]
    if not running:
        conditions.append(seen >= func.now() - bindparam("within", type_=Interval))
    return select(
        table.c.locked_by.label("worker_id"),
        table.c.queue_name,
        (table.c.id if running else cast(null(), BigInteger)).label("running_id"),
        seen.label("seen"),
        literal_column("0" if running else "1", Integer).label("finished"),
    ).where(*conditions)


def database_now() -> Executable:
    """The moment the stats describe: the transaction's start on the database clock."""
    return select(func.now().label("now"))
