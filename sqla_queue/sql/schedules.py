"""Periodic schedules: statements on the job table's companion ``<table>_schedules``
(revision sqlaq_0005), one row per schedule name holding the last tick enqueued.

The row is what makes a tick happen once: any worker may try to enqueue a tick, and the
conditional upsert (`advance_schedule`) lets exactly one transaction move ``last_tick`` to it;
that transaction, and only that one, inserts the tick's job before it commits
(`sqla_queue.core.schedules.fire_tick`).
"""

from __future__ import annotations

from sqlalchemy import DateTime, Table, Text, any_, bindparam, exists, func, select
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, insert
from sqlalchemy.sql import Executable

from ..tables import schedules_table
from ..types import JobStatus
from ._predicates import status_is


def advance_schedule(table: Table) -> Executable:
    """Move ``:name``'s last tick to ``:tick`` if the stored one is older (or create the row);
    returns the row only when it moved.

    Two workers racing one tick: the second's ON CONFLICT waits on the first's row lock and,
    once that commits, re-checks the WHERE against the committed row; ``last_tick < :tick`` is
    then false, nothing is returned, and it enqueues nothing. A tick older than the stored one
    (a worker whose clock is behind) never moves it back.
    """
    schedules = schedules_table(table)
    statement = insert(schedules).values(
        name=bindparam("name", type_=Text),
        last_tick=bindparam("tick", type_=DateTime(timezone=True)),
    )
    return statement.on_conflict_do_update(
        index_elements=[schedules.c.name],
        set_={"last_tick": statement.excluded.last_tick, "updated_at": func.now()},
        where=schedules.c.last_tick < statement.excluded.last_tick,
    ).returning(schedules.c.last_tick)


def last_tick_locked(table: Table) -> Executable:
    """``:name``'s last tick, its row locked until the transaction ends (no row: never ran).

    A backfill counts the ticks since the last one; the lock keeps another worker from moving
    it between this read and `advance_schedule`. After waiting for a lock, FOR UPDATE returns
    the row's newest committed version, so the count never starts from a stale tick."""
    schedules = schedules_table(table)
    return (
        select(schedules.c.last_tick)
        .where(schedules.c.name == bindparam("name", type_=Text))
        .with_for_update()
    )


def last_ticks(table: Table) -> Executable:
    """``(name, last_tick)`` of the schedules named in ``:names`` that have run: a primary-key
    lookup per name."""
    schedules = schedules_table(table)
    return (
        select(schedules.c.name, schedules.c.last_tick)
        .where(schedules.c.name == any_(bindparam("names", type_=ARRAY(Text))))
        .order_by(schedules.c.name)
    )


def tick_pending(table: Table) -> Executable:
    """Whether a tick's job of task ``:task`` with payload ``:payload`` (a job with a
    ``scheduled_at``: a schedule's) is still pending on ``:queue``: a schedule with
    ``skip_if_pending`` enqueues no new tick then. Two schedules of one task differ by payload
    (or are the same schedule twice). A probe of the queue's part of the pending claim index
    that stops at its first match."""
    return select(exists().where(
        table.c.queue_name == bindparam("queue", type_=Text),
        status_is(table, JobStatus.PENDING),
        table.c.task == bindparam("task", type_=Text),
        table.c.scheduled_at.is_not(None),
        table.c.payload == bindparam("payload", type_=JSONB),
    ))
