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

from sqlalchemy import ColumnElement, Integer, Interval, Table, bindparam, cast, func, select
from sqlalchemy.sql import Executable

from ..types import JobStatus
from ._predicates import status_is


def _count_where(condition: ColumnElement[bool]) -> ColumnElement[int]:
    return cast(func.count().filter(condition), Integer)


def queue_health(table: Table) -> Executable:
    """Active jobs per queue: counts, eligible vs scheduled, oldest eligible age, near the limit.

    ``status IN ('pending', 'running')`` is the active-key index's own predicate, so the planner
    reads that partial index (every active row, none finished) instead of the table. "Eligible"
    repeats the claim's predicate: due now (database time) with attempts left.
    """
    now = func.clock_timestamp()
    pending = status_is(table, JobStatus.PENDING)
    eligible = pending & (table.c.run_at <= now) & (table.c.attempts < table.c.max_attempts)
    return (
        select(
            table.c.queue_name,
            _count_where(pending).label("pending"),
            _count_where(status_is(table, JobStatus.RUNNING)).label("running"),
            _count_where(eligible).label("eligible"),
            _count_where(pending & (table.c.run_at > now)).label("scheduled"),
            (now - func.min(table.c.run_at).filter(eligible)).label("oldest_eligible_age"),
            _count_where(table.c.attempts >= table.c.max_attempts - 1).label("near_max_attempts"),
        )
        .where(status_is(table, JobStatus.PENDING, JobStatus.RUNNING))
        .group_by(table.c.queue_name)
        .order_by(table.c.queue_name)
    )


def completed_in_window(table: Table) -> Executable:
    """Jobs completed in the last ``:window`` per queue, with claim-to-completion percentiles.

    ``locked_at`` stays on a completed row (the claim time of its final attempt), so the
    duration is the last attempt's, queue wait excluded. A range scan on the completed-at index.
    """
    duration = table.c.completed_at - table.c.locked_at
    return (
        select(
            table.c.queue_name,
            cast(func.count(), Integer).label("completed"),
            func.percentile_cont(0.5).within_group(duration).label("duration_p50"),
            func.percentile_cont(0.95).within_group(duration).label("duration_p95"),
            func.max(duration).label("duration_max"),
        )
        .where(
            status_is(table, JobStatus.COMPLETED),
            table.c.completed_at >= func.now() - bindparam("window", type_=Interval),
        )
        .group_by(table.c.queue_name)
    )


def failed_in_window(table: Table) -> Executable:
    """Terminal failures in the last ``:window`` per queue: a range scan on the failed-at index."""
    return (
        select(table.c.queue_name, cast(func.count(), Integer).label("failed"))
        .where(
            status_is(table, JobStatus.FAILED),
            table.c.failed_at >= func.now() - bindparam("window", type_=Interval),
        )
        .group_by(table.c.queue_name)
    )


def cancelled_in_window(table: Table) -> Executable:
    """Jobs cancelled in the last ``:window`` per queue: a range scan on the cancelled-at index.

    A running job whose cancel was requested counts once it ended cancelled, by that time."""
    return (
        select(table.c.queue_name, cast(func.count(), Integer).label("cancelled"))
        .where(
            status_is(table, JobStatus.CANCELLED),
            table.c.cancelled_at >= func.now() - bindparam("window", type_=Interval),
        )
        .group_by(table.c.queue_name)
    )


def counted_in_window(counters: Table) -> Executable:
    """Counter totals per queue and kind since the minute ``:window`` ago began.

    Counters have minute resolution, so the window is widened to whole minutes (by less than
    one). A range scan on the counters' primary key, which leads with the bucket.
    """
    return (
        select(
            counters.c.queue_name,
            counters.c.kind,
            cast(func.sum(counters.c.events), Integer).label("events"),
        )
        .where(counters.c.bucket >= func.date_trunc("minute", func.now() - bindparam("window", type_=Interval)))
        .group_by(counters.c.queue_name, counters.c.kind)
    )


def database_now() -> Executable:
    """The moment the stats describe: the transaction's start on the database clock."""
    return select(func.now().label("now"))
