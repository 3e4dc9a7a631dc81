"""Reads of single jobs, and of pending jobs for the testing helpers."""

from __future__ import annotations

from sqlalchemy import ColumnElement, Integer, Table, Text, any_, bindparam, exists, func, select, true, update
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.sql import Executable

from ..tables import queues_table
from ..types import ACTIVE_STATUSES, JobStatus
from ._predicates import status_is
from .claim.order import DEFAULT_ORDER, ClaimOrder


def select_job(table: Table) -> Executable:
    return select(table).where(table.c.id == bindparam("job_id"))


def watch_job(table: Table) -> Executable:
    """Mark active job ``:job_id`` watched, so the statement that finishes it announces it on
    the finished channel (`notify.announce_finished`); no row: it is finished or unknown."""
    return (
        update(table)
        .where(table.c.id == bindparam("job_id"), status_is(table, *ACTIVE_STATUSES))
        .values(watched=true())
        .returning(table.c.id)
    )


def claim_state(table: Table) -> Executable:
    """What a lost claim finds instead: used only on the rare lost-claim path, to say why."""
    return select(table.c.status, table.c.claim_token, table.c.last_error, table.c.cancel_requested_at).where(
        table.c.id == bindparam("job_id")
    )


# -- what the testing helpers read (sqla_queue.testing) ---------------------------------------


def pending_jobs(table: Table, *, by_task: bool = False, by_queue: bool = False,
                 by_payload: bool = False) -> Executable:
    """Up to ``:limit`` pending jobs in id order, optionally of task ``:task``, in queue
    ``:queue``, and whose payload contains ``:payload`` (JSONB ``@>``: every key given, with
    that value, nested mappings compared the same way): `sqla_queue.testing.enqueued`."""
    conditions: list[ColumnElement[bool]] = [status_is(table, JobStatus.PENDING)]
    if by_task:
        conditions.append(table.c.task == bindparam("task", type_=Text))
    if by_queue:
        conditions.append(table.c.queue_name == bindparam("queue", type_=Text))
    if by_payload:
        conditions.append(table.c.payload.contains(bindparam("payload", type_=JSONB)))
    return (select(table).where(*conditions).order_by(table.c.id)
            .limit(bindparam("limit", type_=Integer)))


def pending_queues(table: Table) -> Executable:
    """The queues holding pending jobs of tasks ``:tasks``, by name: what `drain` serves when
    not told."""
    return (
        select(table.c.queue_name)
        .where(status_is(table, JobStatus.PENDING), table.c.task == any_(bindparam("tasks", type_=ARRAY(Text))))
        .group_by(table.c.queue_name)
        .order_by(table.c.queue_name)
    )


def due_jobs(table: Table, order: ClaimOrder = DEFAULT_ORDER) -> Executable:
    """Ids and queues of the jobs of ``:queues`` a claim could take now (pending, due, attempts
    left, queue not paused), in claim order, up to ``:limit`` (NULL: all): what one pass of
    `drain` runs, and the queue a drain claims from next."""
    queues = queues_table(table)
    paused = exists().where(queues.c.queue_name == table.c.queue_name, queues.c.paused_at.is_not(None))
    return (
        select(table.c.id, table.c.queue_name)
        .where(
            table.c.queue_name == any_(bindparam("queues", type_=ARRAY(Text))),
            status_is(table, JobStatus.PENDING),
            table.c.run_at <= func.clock_timestamp(),
            table.c.attempts < table.c.max_attempts,
            ~paused,
        )
        .order_by(*order.order_by(table))
        .limit(bindparam("limit", type_=Integer))
    )


def delete_queue_jobs(table: Table) -> Executable:
    """Delete every job of queue ``:queue``: the plugin conformance checks' clean-up of the
    queue of their own (`sqla_queue.testing`); nothing in a queue's life deletes by queue."""
    return table.delete().where(table.c.queue_name == bindparam("queue", type_=Text))
