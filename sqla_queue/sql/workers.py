"""The worker registry (``<table>_workers``, `tables.workers_table`): what each worker writes
about itself, what operators read, and doctor's questions about unserved work.

A worker's row is written by the worker alone: one upsert at start and on every beat of its
lease keeper, one delete on a clean exit. Liveness is decided by the database clock: a row whose
``expires_at`` (last beat plus the worker's lease) has passed belongs to a dead worker, whatever
its ``state`` says, so a worker killed with ``kill -9`` turns dead without writing anything.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, Integer, Interval, Table, any_, bindparam, cast, exists, func, select
from sqlalchemy.dialects.postgresql import aggregate_order_by, insert
from sqlalchemy.sql import Executable

from ..types import JobStatus
from ._predicates import status_is

DESCRIBED = ("host", "pid", "version", "queues", "tasks", "concurrency")
"""What a worker says about itself at every beat (bound parameters of the same names)."""


def alive(workers: Table, now: ColumnElement | None = None) -> ColumnElement[bool]:
    """The worker has beaten within its lease."""
    return workers.c.expires_at > (func.now() if now is None else now)


def beat(workers: Table) -> Executable:
    """Insert or refresh worker ``:worker_id``'s row: its description, ``:state``, and a
    heartbeat now (database time) that keeps it alive for ``:lease``.

    An upsert, so the start and every beat are the same one statement, and a row an operator
    (or the pruning of a worker that was cut off for a day) deleted comes back at the next beat.
    ``started_at`` is only set by the insert. ``now()``, one value for the whole statement, so
    ``expires_at - heartbeat_at`` is exactly the lease.
    """
    now = func.now()
    statement = insert(workers).values(
        id=bindparam("worker_id"),
        **{name: bindparam(name) for name in DESCRIBED},
        state=bindparam("state"),
        started_at=now,
        heartbeat_at=now,
        expires_at=now + bindparam("lease", type_=Interval),
    )
    changed = (*DESCRIBED, "state", "heartbeat_at", "expires_at")
    return statement.on_conflict_do_update(
        index_elements=[workers.c.id],
        set_={name: getattr(statement.excluded, name) for name in changed},
    )


def register(workers: Table) -> Executable:
    """`beat`, and in the same statement delete the rows of workers dead for ``:retention``
    (a worker that never exits cleanly leaves its row behind; the next one to start sweeps it)."""
    pruned = (
        workers.delete()
        .where(workers.c.expires_at < func.now() - bindparam("retention", type_=Interval))
        .returning(workers.c.id)
        .cte("pruned")
    )
    statement = beat(workers)
    return statement.add_cte(pruned)


def remove(workers: Table) -> Executable:
    """Delete worker ``:worker_id``'s row (its clean exit)."""
    return workers.delete().where(workers.c.id == bindparam("worker_id"))


def list_workers(table: Table, workers: Table) -> Executable:
    """Every registered worker with whether it is alive and the ids of the jobs it holds now
    (NULL: none), live ones first, then by start.

    The running jobs come from ``locked_by`` through the running-expiry index (only running
    rows), once per worker: the registry is a handful of rows.
    """
    running = (
        select(func.array_agg(aggregate_order_by(table.c.id, table.c.id)))
        .where(status_is(table, JobStatus.RUNNING), table.c.locked_by == workers.c.id)
        .scalar_subquery()
    )
    is_alive = alive(workers)
    return (
        select(workers, is_alive.label("alive"), running.label("running_job_ids"),
               func.clock_timestamp().label("now"))
        .order_by(is_alive.desc(), workers.c.started_at, workers.c.id)
    )


def eligible_demand(table: Table, workers: Table, queues: Table) -> Executable:
    """Eligible jobs (due, pending, attempts left: the claim's predicate) per queue and task,
    the age of the oldest, and whether a live worker serves the queue and one registers the task
    for it. Paused queues are left out: their jobs wait on purpose.

    Aggregated first, through the pending claim index, and only then compared with the
    registry, so the registry is read once per (queue, task), never once per job.
    """
    now = func.now()
    eligible = (status_is(table, JobStatus.PENDING) & (table.c.run_at <= now)
                & (table.c.attempts < table.c.max_attempts))
    demand = (
        select(table.c.queue_name, table.c.task, cast(func.count(), Integer).label("jobs"),
               (now - func.min(table.c.run_at)).label("oldest_age"))
        .where(eligible)
        .group_by(table.c.queue_name, table.c.task)
        .subquery("demand")
    )
    serves_queue = alive(workers) & (demand.c.queue_name == any_(workers.c.queues))
    paused = exists().where(queues.c.queue_name == demand.c.queue_name, queues.c.paused_at.is_not(None))
    return (
        select(
            demand,
            exists().where(serves_queue).label("queue_served"),
            exists().where(serves_queue, demand.c.task == any_(workers.c.tasks)).label("task_served"),
        )
        .where(~paused)
        .order_by(demand.c.queue_name, demand.c.task)
    )

