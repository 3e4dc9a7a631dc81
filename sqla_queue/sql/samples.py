"""The per-minute history of each queue (``<table>_samples``, revision sqlaq_0006).

One statement records a minute: what the queue's health reads (`stats`) say about it, written
once whichever worker gets there first, and the rows older than the retention deleted by the
worker that wrote it. Another reads the history back. See `tables.samples_table` for what a row
means.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import (
    ColumnElement,
    Integer,
    Interval,
    Table,
    bindparam,
    cast,
    exists,
    func,
    literal,
    literal_column,
    null,
    select,
    union_all,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.sql import Executable, Select

from ..tables import SAMPLE_COUNTS
from . import counters as counter_sql
from . import stats

EMPTY_KINDS = (counter_sql.EMPTY_LOCKED, counter_sql.EMPTY_SCHEDULED, counter_sql.EMPTY_EXHAUSTED,
               counter_sql.EMPTY_OTHER_QUEUE)
"""The counter kinds a sample adds up as its ``empty_claims``."""

_INTERVALS = ("oldest_eligible_age", "duration_p50", "duration_p95")
_ONE_MINUTE = timedelta(minutes=1)


def sampled_minute() -> ColumnElement:
    """The minute a sample taken now describes: the last one that ended, on the database clock."""
    return func.date_trunc("minute", func.now()) - literal(_ONE_MINUTE, Interval, literal_execute=True)


def record_sample(table: Table, counters: Table, samples: Table) -> Executable:
    """Write the last minute's row for every queue that had active jobs or events in it, unless
    a row for that minute exists already; then, only if it wrote, delete the rows older than
    ``:retention``. Returns ``written`` and ``deleted``.

    Each source is the statement `stats` runs, bounded to the minute: the active aggregate (the
    partial indexes of the active states), completions and failures in the minute (ranges on the completed- and
    failed-at indexes), the minute's counters (a range on their primary key). The NOT EXISTS
    test on the samples' primary key is a one-time filter: when another worker wrote the minute,
    nothing else is read. ``ON CONFLICT DO NOTHING`` settles two workers that sample at once.
    """
    minute = sampled_minute()
    minute_end = func.date_trunc("minute", func.now())
    parts = union_all(
        _backlog_part(table),
        _completed_part(stats.completed_between(table, minute, minute_end).subquery("completed")),
        _failed_part(stats.failed_between(table, minute, minute_end).subquery("failed")),
        _counted_part(stats.counted_between(counters, minute, minute_end).subquery("counted")),
    ).subquery("parts")
    rows = (
        select(
            minute.label("bucket"),
            parts.c.queue_name,
            *(cast(func.sum(parts.c[name]), Integer).label(name) for name in SAMPLE_COUNTS),
            *(func.max(parts.c[name]).label(name) for name in _INTERVALS),
        )
        .where(~exists().where(samples.c.bucket == minute))
        .group_by(parts.c.queue_name)
    )
    columns = ["bucket", "queue_name", *SAMPLE_COUNTS, *_INTERVALS]
    written = (
        insert(samples).from_select(columns, rows)
        .on_conflict_do_nothing(index_elements=[samples.c.bucket, samples.c.queue_name])
        .returning(samples.c.queue_name)
        .cte("written")
    )
    deleted = (
        samples.delete()
        .where(samples.c.bucket < func.now() - bindparam("retention", type_=Interval),
               exists().select_from(written))
        .returning(samples.c.bucket)
        .cte("deleted")
    )
    return select(
        select(func.count()).select_from(written).scalar_subquery().label("written"),
        select(func.count()).select_from(deleted).scalar_subquery().label("deleted"),
    )


def history(samples: Table, *, by_queue: bool = False) -> Executable:
    """The samples of the minutes since ``:since`` ago (of queue ``:queue`` when `by_queue`), in
    (minute, queue) order: a range on the samples' primary key."""
    conditions = [samples.c.bucket >= func.date_trunc("minute", func.now() - bindparam("since", type_=Interval))]
    if by_queue:
        conditions.append(samples.c.queue_name == bindparam("queue"))
    return select(samples).where(*conditions).order_by(samples.c.bucket, samples.c.queue_name)


def _part(queue_name: ColumnElement, **values: ColumnElement) -> Select:
    """One source of a sample as a row of every sample column: zero counts and NULL intervals
    where the source says nothing."""
    counts = [values.get(name, literal_column("0", Integer)).label(name) for name in SAMPLE_COUNTS]
    intervals = [values.get(name, cast(null(), Interval)).label(name) for name in _INTERVALS]
    return select(queue_name.label("queue_name"), *counts, *intervals)


def _backlog_part(table: Table) -> Select:
    health = stats.queue_health(table).order_by(None).subquery("health")
    return _part(health.c.queue_name, pending=health.c.pending, eligible=health.c.eligible,
                 scheduled=health.c.scheduled, running=health.c.running,
                 oldest_eligible_age=health.c.oldest_eligible_age)


def _completed_part(completed) -> Select:
    return _part(completed.c.queue_name, completed=completed.c.completed,
                 duration_p50=completed.c.duration_p50, duration_p95=completed.c.duration_p95)


def _failed_part(failed) -> Select:
    return _part(failed.c.queue_name, failed=failed.c.failed)


def _counted_part(counted) -> Select:
    def events_of(*kinds: str) -> ColumnElement:
        return cast(func.coalesce(func.sum(counted.c.events).filter(counted.c.kind.in_(kinds)), 0), Integer)

    return _part(counted.c.queue_name, retried=events_of(counter_sql.RETRIED),
                 empty_claims=events_of(*EMPTY_KINDS)).group_by(counted.c.queue_name)
