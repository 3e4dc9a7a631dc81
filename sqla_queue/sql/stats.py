"""Health-signal aggregates per queue."""

from __future__ import annotations

from sqlalchemy import Integer, Table, cast, func, select
from sqlalchemy.sql import Executable

from ..types import JobStatus
from ._predicates import status_is


def queue_health(table: Table) -> Executable:
    """Counts by status, eligible vs scheduled pending, oldest eligible age, jobs near their limit.

    "Eligible" repeats the claim's predicate: due now (database time) with attempts left.
    """
    now = func.clock_timestamp()
    pending = status_is(table, JobStatus.PENDING)
    eligible = pending & (table.c.run_at <= now) & (table.c.attempts < table.c.max_attempts)

    def count_where(condition):
        return cast(func.count().filter(condition), Integer)

    return (
        select(
            table.c.queue_name,
            count_where(pending).label("pending"),
            count_where(status_is(table, JobStatus.RUNNING)).label("running"),
            count_where(status_is(table, JobStatus.COMPLETED)).label("completed"),
            count_where(status_is(table, JobStatus.FAILED)).label("failed"),
            count_where(eligible).label("eligible"),
            count_where(pending & (table.c.run_at > now)).label("scheduled"),
            (now - func.min(table.c.run_at).filter(eligible)).label("oldest_eligible_age"),
            count_where(
                status_is(table, JobStatus.PENDING, JobStatus.RUNNING)
                & (table.c.attempts >= table.c.max_attempts - 1)
            ).label("near_max_attempts"),
        )
        .group_by(table.c.queue_name)
        .order_by(table.c.queue_name)
    )
