"""Queue control: pause and resume a queue for every worker at once, and the queues' states.

A paused queue is a row of ``<table>_queues`` with ``paused_at`` set; the claim statement skips
its jobs (sql/claim.py), so pausing is one small write that every worker sees at its next claim,
whatever process or host it runs in. Jobs are not touched: enqueue into a paused queue works,
running jobs finish, and resuming is clearing the column.
"""

from __future__ import annotations

from sqlalchemy import Integer, Table, bindparam, cast, func, select, true
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.sql import Executable

from ..types import JobStatus
from ._predicates import status_is, status_is_one_of


def pause_queue(queues: Table) -> Executable:
    """Mark queue ``:queue`` paused; returns its row.

    An upsert, so pausing a queue that has no row yet (or no jobs yet) works, and pausing a
    paused queue keeps the time it was first paused: that is when claiming stopped.
    """
    statement = insert(queues).values(queue_name=bindparam("queue"), paused_at=func.clock_timestamp())
    return statement.on_conflict_do_update(
        index_elements=[queues.c.queue_name],
        set_={"paused_at": func.coalesce(queues.c.paused_at, statement.excluded.paused_at)},
    ).returning(queues.c.queue_name, queues.c.paused_at)


def resume_queue(queues: Table) -> Executable:
    """Clear queue ``:queue``'s pause; returns its row, or nothing when it never had one."""
    return (
        queues.update()
        .where(queues.c.queue_name == bindparam("queue"))
        .values(paused_at=None)
        .returning(queues.c.queue_name, queues.c.paused_at)
    )


def queue_states(table: Table, queues: Table, *, one: bool = False) -> Executable:
    """Every queue with active jobs or a row of its own (only queue ``:queue`` with `one`):
    pause state, pending and running counts.

    The counts read only active rows (``status = 'pending' OR status = 'running'``, each state
    through its partial index, as in `stats.queue_health`), never the finished jobs a busy table
    is mostly made of; the queues table is small. A full join keeps a paused queue without jobs
    and a queue with jobs that was never paused.
    """
    active = (
        select(
            table.c.queue_name,
            cast(func.count().filter(status_is(table, JobStatus.PENDING)), Integer).label("pending"),
            cast(func.count().filter(status_is(table, JobStatus.RUNNING)), Integer).label("running"),
        )
        .where(status_is_one_of(table, JobStatus.PENDING, JobStatus.RUNNING),
               *([table.c.queue_name == bindparam("queue")] if one else []))
        .group_by(table.c.queue_name)
        .subquery("active")
    )
    rows = select(queues).where(*([queues.c.queue_name == bindparam("queue")] if one else [])).subquery("paused")
    name = func.coalesce(active.c.queue_name, rows.c.queue_name)
    return (
        select(
            name.label("queue_name"),
            rows.c.paused_at,
            func.coalesce(active.c.pending, 0).label("pending"),
            func.coalesce(active.c.running, 0).label("running"),
        )
        .select_from(active.join(rows, active.c.queue_name == rows.c.queue_name, full=True))
        .order_by(name)
    )


def paused_queues(queues: Table) -> Executable:
    """The paused queues, for the health signals."""
    return select(queues.c.queue_name, true().label("paused")).where(queues.c.paused_at.is_not(None))
