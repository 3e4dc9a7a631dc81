"""Enqueue: one INSERT for any number of jobs, deduplicated by the database."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Integer,
    Interval,
    SmallInteger,
    Table,
    Text,
    and_,
    any_,
    bindparam,
    case,
    cast,
    column,
    func,
    literal,
    null,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, insert
from sqlalchemy.sql import Executable

from ..tables import limits_table
from ..types import ACTIVE_STATUSES, JobStatus
from ._predicates import status_is

# One array parameter per column: the statement text is the same for 1 or 10,000 jobs, so it is
# compiled once and the whole batch is one round trip, with no limit on bound parameters.
_INPUT_COLUMNS = (
    ("queue_name", Text),
    ("task", Text),
    ("payload", Text),
    ("run_at", DateTime(timezone=True)),
    ("delay", Interval),
    ("max_attempts", Integer),
    ("idempotency_key", Text),
    ("priority", SmallInteger),
    ("scheduled_at", DateTime(timezone=True)),
    ("meta", Text),
    ("group_key", Text),
)

INPUT_COLUMNS = tuple(name for name, _ in _INPUT_COLUMNS)
"""`insert_job`'s parameter names, in order; `insert_jobs` takes each as an array named ``<name>s``."""


GRAPH_COLUMNS = ("status", "waiting_on", "dependents")
"""What `insert_jobs` with `graph` also takes, as arrays ``:statuses``, ``:waiting_ons`` and
``:dependent_counts``: each job's first state and its two dependency counts."""


def insert_jobs(table: Table, *, graph: bool = False) -> Executable:
    """Insert the jobs given as parallel arrays; RETURNING ``id, idempotency_key``.

    A job whose key is held by an active (pending or running) job is skipped by
    ``ON CONFLICT DO NOTHING`` and returns no row; the caller then looks the holder up. If the
    holder's transaction has not committed yet, PostgreSQL makes this insert wait for it and
    then either skips (it committed) or inserts (it rolled back).

    Rows are inserted in input order (``ORDER BY ord``), so the identity values ascend in input
    order; the caller relies on that to map returned ids back to its inputs.

    With ``:notify`` true, each inserted row also queues ``pg_notify(:channel, queue_name)``:
    the wake-up of an enqueue in the caller's transaction. PostgreSQL delivers notifications
    only when the transaction commits (so a rolled-back enqueue wakes nobody) and folds
    identical ones, so a batch sends one per queue. But a notifying commit holds a
    database-wide lock through its WAL flush, so concurrent notifying enqueues commit one at a
    time; an enqueue in a transaction of our own passes false and is announced after its
    commit instead (`wake_queues`, `_notifier`).

    With `graph` (jobs with dependencies, `core.workflows`), each row also gets its status
    (waiting or pending) and its ``waiting_on`` and ``dependents`` counts.
    """
    inputs = _INPUT_COLUMNS + (_GRAPH_INPUTS if graph else ())
    src = (
        func.unnest(*(bindparam(_array_name(name), type_=ARRAY(type_)) for name, type_ in inputs))
        .table_valued(*(column(name, type_) for name, type_ in inputs), with_ordinality="ord")
        .render_derived()
    )
    rows = select(
        src.c.queue_name,
        src.c.task,
        cast(src.c.payload, JSONB),
        func.coalesce(src.c.run_at, func.now() + src.c.delay),
        src.c.max_attempts,
        src.c.idempotency_key,
        src.c.priority,
        src.c.scheduled_at,
        cast(src.c.meta, JSONB),
        src.c.group_key,
        fair_turn(table, src.c.queue_name, src.c.group_key,
                  func.row_number().over(partition_by=[src.c.queue_name, src.c.group_key], order_by=src.c.ord)),
        *(src.c[name] for name in GRAPH_COLUMNS if graph),
    ).order_by(src.c.ord)
    return _skipping_held_keys_and_notifying(
        table,
        insert(table).from_select(
            ["queue_name", "task", "payload", "run_at", "max_attempts", "idempotency_key", "priority",
             "scheduled_at", "meta", "group_key", "fair_tag", *(GRAPH_COLUMNS if graph else ())], rows
        ),
    )


_GRAPH_INPUTS = (("status", Text), ("waiting_on", Integer), ("dependents", Integer))
_GRAPH_ARRAYS = {"status": "statuses", "waiting_on": "waiting_ons", "dependents": "dependent_counts"}


def _array_name(name: str) -> str:
    return _GRAPH_ARRAYS.get(name, f"{name}s")


def insert_job(table: Table) -> Executable:
    """`insert_jobs` for exactly one job, with one scalar parameter per column.

    The same row, conflict rule, ``RETURNING`` columns and notification, without unnesting seven
    one-element arrays: a single enqueue is one round trip whose server and client costs are
    mostly this statement's, and the plain ``VALUES`` form is cheaper at both ends.
    """
    values = {name: bindparam(name, type_=type_) for name, type_ in _INPUT_COLUMNS}
    return _skipping_held_keys_and_notifying(
        table,
        insert(table).values(
            queue_name=values["queue_name"],
            task=values["task"],
            payload=cast(values["payload"], JSONB),
            run_at=func.coalesce(values["run_at"], func.now() + values["delay"]),
            max_attempts=values["max_attempts"],
            idempotency_key=values["idempotency_key"],
            priority=values["priority"],
            scheduled_at=values["scheduled_at"],
            meta=cast(values["meta"], JSONB),
            group_key=values["group_key"],
            fair_tag=fair_turn(table, values["queue_name"], values["group_key"], literal(1)),
        ),
    )


def insert_job_unless_fair(table: Table) -> Executable:
    """`insert_job` into a queue that is not fair; into a fair one, nothing. Its one row says
    which: ``fair``, and ``id, idempotency_key`` of the job inserted (NULL when the queue is fair
    or an active job holds the key).

    Most single enqueues are a process's first statements (a web request's, a script's), and
    there `fair_turn`'s three reads of the job table cost more to build, compile and plan than
    the rest of the INSERT. Here the queue's fairness is read as `insert_job` reads it, in the
    statement, so a queue made fair a moment ago is seen; the caller then sends `insert_job`.
    """
    limits = limits_table(table)
    values = {name: bindparam(name, type_=type_) for name, type_ in _INPUT_COLUMNS}
    fair = select(
        select(limits.c.queue_name)
        .where(limits.c.queue_name == values["queue_name"], limits.c.fair).exists().label("fair")
    ).cte("fairness")
    row = select(
        values["queue_name"], values["task"], cast(values["payload"], JSONB),
        func.coalesce(values["run_at"], func.now() + values["delay"]),
        values["max_attempts"], values["idempotency_key"], values["priority"], values["scheduled_at"],
        cast(values["meta"], JSONB), values["group_key"],
    ).where(~select(fair.c.fair).scalar_subquery())
    return _skipping_held_keys_and_notifying(
        table,
        insert(table).from_select(
            ["queue_name", "task", "payload", "run_at", "max_attempts", "idempotency_key", "priority",
             "scheduled_at", "meta", "group_key"], row),
        fairness=fair,
    )


def fair_turn(table: Table, queue, key, rank):
    """The turn (``fair_tag``) of the `rank`-th job (1, 2, ...) of `key` in one enqueue into
    `queue`, when that queue is fair; NULL otherwise (docs/explanation/limits.md, "Fair turns").

    Start-time fair queuing: a key with pending jobs queues behind its own last turn; a key with
    none joins the turn the queue serves now (its first due pending turn), so a tenant that
    arrives late waits for one turn of each busy key, not for their backlogs. Jobs without a
    key take turns as one more key. Whether the queue is fair is read once per statement (a
    hashed subplan on the small limits table), and the two index reads are made only for a
    fair queue's jobs; two enqueues of one key at once may share a turn (ties go by id)."""
    limits = limits_table(table)
    jobs = table.alias("turns")
    with_turn = [jobs.c.queue_name == queue, status_is(jobs, JobStatus.PENDING), jobs.c.fair_tag.is_not(None)]
    last_of_key = case(
        (key.is_(None), select(func.max(jobs.c.fair_tag)).where(*with_turn, jobs.c.group_key.is_(None))
         .scalar_subquery()),
        else_=select(func.max(jobs.c.fair_tag)).where(*with_turn, jobs.c.group_key == key).scalar_subquery())
    served_now = (select(jobs.c.fair_tag).where(*with_turn, jobs.c.run_at <= func.clock_timestamp())
                  .order_by(jobs.c.fair_tag).limit(1).scalar_subquery())
    fair_queues = select(limits.c.queue_name).where(limits.c.fair)
    first = func.coalesce(last_of_key + 1, served_now, 0)
    return case((queue.in_(fair_queues), cast(first + rank - 1, BigInteger)), else_=cast(null(), BigInteger))


def _skipping_held_keys_and_notifying(table: Table, inserting, *, fairness=None) -> Executable:
    """The enqueue INSERT's shared tail: skip a job whose key an active job holds, return
    ``id, idempotency_key`` and, when ``:notify``, queue one ``pg_notify`` per inserted row
    (see `insert_jobs`); with `fairness` (`insert_job_unless_fair`'s one-row CTE), one row
    whatever was inserted, with its ``fair`` column."""
    # No conflict target: a partitioned job table (`sqla_queue.ops.storage`) cannot carry the
    # active-key index on its parent, only on its live partition, and a target must name an
    # index of the table inserted into. Without one, any unique index of the partition the row
    # lands in arbitrates: the primary key (never, ids are fresh) and the active-key index.
    inserted = (
        inserting.on_conflict_do_nothing()
        .returning(table.c.id, table.c.idempotency_key, table.c.queue_name)
        .cte("inserted")
    )
    notify = bindparam("notify", type_=Boolean)
    if fairness is not None:  # its row for nothing inserted must not notify: pg_notify sends a NULL payload
        notify = and_(notify, inserted.c.id.is_not(None))
    returned = select(
        inserted.c.id,
        inserted.c.idempotency_key,
        case((notify, func.pg_notify(bindparam("channel"), inserted.c.queue_name))).label("notified"),
    )
    if fairness is None:
        return returned
    return returned.add_columns(fairness.c.fair).select_from(fairness.outerjoin(inserted, true()))


def find_active_keys(table: Table) -> Executable:
    """The active job holding each of ``:keys`` (a fresh snapshot sees just-committed holders)."""
    return select(table.c.idempotency_key, table.c.id).where(
        table.c.idempotency_key == any_(bindparam("keys", type_=ARRAY(Text))),
        status_is(table, *ACTIVE_STATUSES),
    )
