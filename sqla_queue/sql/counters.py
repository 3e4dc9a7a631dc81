"""Event counters: upserts into the job table's companion ``<table>_counters`` (sqlaq_0003).

Each statement runs inside the transaction of the event it counts, so a count exists exactly
when its event committed. One row per (minute, queue, kind) is incremented in place: the counter
columns carry no index, so the update is HOT and the table stays a few pages.
"""

from __future__ import annotations

from sqlalchemy import ARRAY, BigInteger, Interval, Table, Text, bindparam, case, column, exists, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.sql import Executable

from ..types import JobStatus
from ._predicates import status_is

RETRIED = "retried"
LEASE_RECOVERED = "lease_recovered"
EMPTY_LOCKED = "empty_locked"
EMPTY_SCHEDULED = "empty_scheduled"
EMPTY_EXHAUSTED = "empty_exhausted"
EMPTY_OTHER_QUEUE = "empty_other_queue"
THROTTLED = "throttled"
"""A claim of a limited queue took fewer jobs than it asked for while due jobs were left: a limit
held them back (`sql.claim.limited`). Not an empty claim: the queue is working as configured."""


def minute():
    """The counter row's bucket: the current minute of the database clock."""
    return func.date_trunc("minute", func.clock_timestamp())


def upsert(counters: Table, rows) -> Executable:
    """Add `rows` (bucket, queue, kind, events) to the counters, creating the rows missing."""
    statement = insert(counters).from_select(["bucket", "queue_name", "kind", "events"], rows)
    return statement.on_conflict_do_update(
        index_elements=[counters.c.bucket, counters.c.queue_name, counters.c.kind],
        set_={"events": counters.c.events + statement.excluded.events},
    )


def count_events(counters: Table) -> Executable:
    """Add ``:events`` events of ``:kind`` to ``:queue``'s counter for the current minute."""
    rows = select(
        minute(),
        bindparam("queue", type_=Text),
        bindparam("kind", type_=Text),
        bindparam("events", type_=BigInteger),
    )
    return upsert(counters, rows)


def count_empty_claim(table: Table, counters: Table) -> Executable:
    """Classify the claims that returned nothing from the queues in ``:queues``, add each
    queue's ``:events`` (a list aligned with ``:queues``) under its reason, and return
    ``(queue_name, kind)`` per queue counted.

    Run right after an empty claim, only then: when jobs flow, claims return rows and this
    never runs. One statement for every queue the claim read (a worker's claim reads all it
    serves). Returns no row, and writes nothing, for a queue when no job is pending anywhere
    (an idle queue is not a signal). Otherwise the first reason that holds is counted:

    * ``empty_locked``: due jobs with attempts left exist in this queue, so the claim's
      SKIP LOCKED passed over them (another transaction held their rows), they became
      visible a moment after the claim's snapshot, or their task is one the claiming worker
      does not register;
    * ``empty_scheduled``: this queue's pending jobs are all due later;
    * ``empty_exhausted``: pending jobs with no attempts left (only a manual edit makes them);
    * ``empty_other_queue``: jobs are pending, but only in other queues.

    Each test is an EXISTS probe on the pending claim index that stops at its first row.
    """
    asked = func.unnest(bindparam("queues", type_=ARRAY(Text)), bindparam("events", type_=ARRAY(BigInteger))) \
        .table_valued(column("queue_name", Text), column("events", BigInteger)).render_derived("asked")
    queue = asked.c.queue_name
    reason = case(
        (_pending_exists(table, queue, table.c.run_at <= func.clock_timestamp(),
                         table.c.attempts < table.c.max_attempts), EMPTY_LOCKED),
        (_pending_exists(table, queue, table.c.run_at > func.clock_timestamp(),
                         table.c.attempts < table.c.max_attempts), EMPTY_SCHEDULED),
        (_pending_exists(table, queue, table.c.attempts >= table.c.max_attempts), EMPTY_EXHAUSTED),
        (exists().where(status_is(table, JobStatus.PENDING), table.c.queue_name != queue), EMPTY_OTHER_QUEUE),
    ).label("kind")
    classified = select(queue, asked.c.events, reason).subquery("classified")
    rows = (
        select(minute(), classified.c.queue_name, classified.c.kind, classified.c.events)
        .where(classified.c.kind.is_not(None))
    )
    return upsert(counters, rows).returning(counters.c.queue_name, counters.c.kind)


def _pending_exists(table: Table, queue, *conditions):
    return exists().where(table.c.queue_name == queue, status_is(table, JobStatus.PENDING), *conditions)


def prune_counters(counters: Table) -> Executable:
    """Delete counter rows whose minute began more than ``:age`` ago; returns how many.

    A range on the primary key's leading bucket; the table holds a row per minute, queue and
    kind that saw an event, so one statement is a small batch."""
    gone = (
        counters.delete()
        .where(counters.c.bucket < func.now() - bindparam("age", type_=Interval))
        .returning(counters.c.bucket)
        .cte("gone")
    )
    return select(func.count().label("deleted")).select_from(gone)
