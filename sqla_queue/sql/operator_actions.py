"""Operator actions: list jobs, retry failed jobs now, cancel jobs (one by id, or many by a filter).

None of them can fight a claim. Each write selects its target in a CTE with ``FOR UPDATE SKIP
LOCKED`` and a literal status, so a row that a claim (or any other transaction) holds is
skipped, not waited on, and a row that changed state since the statement's snapshot is
re-checked against the status under the row lock (READ COMMITTED's re-evaluation) and left
alone. Zero rows back means "not in that state, or busy": the caller reads the row to say which.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    DateTime,
    Integer,
    Table,
    any_,
    bindparam,
    case,
    exists,
    false,
    func,
    literal,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql import Executable

from ..types import ACTIVE_STATUSES, JobStatus
from ._predicates import status_is
from .dependencies import rearmed, settled
from .notify import announce_finished, announced


def list_jobs(
    table: Table,
    *,
    status: JobStatus | None = None,
    by_queue: bool = False,
    by_task: bool = False,
    paged: bool = False,
    created_after: bool = False,
    created_before: bool = False,
) -> Executable:
    """Up to ``:limit`` jobs, newest first, optionally filtered; keyset-paged by ``:before_id``.

    The status is a literal of our own enum, so the planner may answer from that status's
    partial index; queue, task and the creation-time bounds (``:created_after`` inclusive,
    ``:created_before`` exclusive) arrive as parameters. Keyset paging (``id < :before_id``)
    costs the same on page 1,000 as on page 1, unlike OFFSET. The time bounds filter the
    primary key's walk from the newest job down (ids grow with creation time); there is no
    index on ``created_at``, which every claim and completion would have to update.
    """
    conditions: list[ColumnElement[bool]] = []
    if status is not None:
        conditions.append(status_is(table, status))
    if by_queue:
        conditions.append(table.c.queue_name == bindparam("queue"))
    if by_task:
        conditions.append(table.c.task == bindparam("task"))
    if paged:
        conditions.append(table.c.id < bindparam("before_id"))
    if created_after:
        conditions.append(table.c.created_at >= bindparam("created_after", type_=DateTime(timezone=True)))
    if created_before:
        conditions.append(table.c.created_at < bindparam("created_before", type_=DateTime(timezone=True)))
    return select(table).where(*conditions).order_by(table.c.id.desc()).limit(bindparam("limit"))


def bulk_filter(table: Table, statuses: tuple[JobStatus, ...], *, by_queue: bool = False, by_task: bool = False,
                by_ids: bool = False) -> list[ColumnElement[bool]]:
    """What a bulk action's filter says: jobs in `statuses` (literals, for the partial
    indexes), of queue ``:queue``, of task ``:task_name`` (``:task`` would clash with the
    column an UPDATE sets), among ``:job_ids``."""
    conditions = [status_is(table, *statuses)]
    if by_queue:
        conditions.append(table.c.queue_name == bindparam("queue"))
    if by_task:
        conditions.append(table.c.task == bindparam("task_name"))
    if by_ids:
        conditions.append(table.c.id == any_(bindparam("job_ids", type_=ARRAY(BigInteger))))
    return conditions


def count_matching(table: Table, conditions: list[ColumnElement[bool]]) -> Executable:
    """How many jobs a bulk action's filter matches, busy ones included: what it reports as
    skipped is this minus what it changed."""
    return select(func.count()).select_from(table).where(*conditions)


def locked_targets(table: Table, conditions: list[ColumnElement[bool]], *, limit: bool = False,
                   with_keys: bool = False) -> Any:
    """The rows an operator write acts on, as a CTE of their ids (and idempotency keys, when
    `with_keys`): matching `conditions`, row-locked, rows another transaction holds skipped;
    the ``:limit`` lowest ids when `limit`."""
    columns = [table.c.id, table.c.idempotency_key] if with_keys else [table.c.id]
    target = select(*columns).where(*conditions).with_for_update(skip_locked=True)
    if limit:
        target = target.order_by(table.c.id).limit(bindparam("limit", type_=Integer))
    return target.cte("target")


def retry_failed_job(table: Table) -> Executable:
    """Failed job ``:job_id`` back to pending, due now, with at least one attempt left.

    ``max_attempts`` grows to ``attempts + 1`` when the job used them all, so the history of
    attempts stays true. ``last_error`` is kept until the next claim clears it. The claim token
    is cleared: a late replay of the outcome that failed the job now finds it changed. A job
    whose idempotency key an active job holds meanwhile is not touched (it would be a duplicate,
    and the active-key index would refuse it).
    """
    return retry_failed(table, locked_targets(table, [table.c.id == bindparam("job_id"),
                                                      status_is(table, JobStatus.FAILED)], with_keys=True))


def retry_failed_jobs(table: Table, *, by_queue: bool = False, by_task: bool = False, by_ids: bool = False) -> Executable:
    """`retry_failed_job` for up to ``:limit`` failed jobs matching a bulk filter (`bulk_filter`)."""
    conditions = bulk_filter(table, (JobStatus.FAILED,), by_queue=by_queue, by_task=by_task, by_ids=by_ids)
    return retry_failed(table, locked_targets(table, conditions, limit=True, with_keys=True))


def retry_failed(table: Table, target: Any) -> Executable:
    """The retry of `retry_failed_job` applied to the failed rows `target` (a CTE of ids and
    keys) locked. Of several targets sharing an idempotency key only the lowest id is retried:
    two active jobs may not hold one key. The dependents their failure cancelled wait for them
    again (`dependencies.rearmed`)."""
    holder = table.alias("holder")
    key_free = ~exists().where(
        holder.c.idempotency_key == table.c.idempotency_key, status_is(holder, *ACTIVE_STATUSES)
    )
    earlier = target.alias("earlier")
    first_of_key = ~exists().where(earlier.c.idempotency_key == table.c.idempotency_key, earlier.c.id < table.c.id)
    retried = (
        update(table)
        .where(table.c.id == target.c.id, key_free, first_of_key)
        .values(
            status=JobStatus.PENDING.value,
            run_at=func.clock_timestamp(),
            max_attempts=func.greatest(table.c.max_attempts, table.c.attempts + 1),
            failed_at=None,
            locked_at=None,
            lease_expires_at=None,
            locked_by=None,
            claim_token=None,
            archived=false(),  # out of the history again, if it was there
        )
        .returning(*table.c)
        .cte("retried")
    )
    rearm = select(func.count().label("rearmed")).select_from(rearmed(table, retried)).cte("rearm_count")
    return select(*retried.c).select_from(retried.outerjoin(rearm, true()))


def cancel_job(table: Table) -> Executable:
    """Cancel job ``:job_id`` in one statement, unless a transaction holds its row; returns it.

    A pending (or waiting) job becomes ``cancelled`` (terminal, kept and pruned like completed and failed
    jobs) and its finish is announced in the same statement, so a ``wait`` on it wakes. A
    running job belongs to its worker: it only gets ``cancel_requested_at`` (the first request's
    time is kept), which the worker sees at its next lease renewal and which turns whatever
    outcome the job then records into ``cancelled``. Which of the two is decided on the row as
    locked, so a claim that committed meanwhile makes this a request, not a cancel.
    """
    return cancel_active(table, locked_targets(table, [table.c.id == bindparam("job_id"),
                                                       status_is(table, *ACTIVE_STATUSES)]))


def cancel_jobs(table: Table, statuses: tuple[JobStatus, ...] = ACTIVE_STATUSES, *, by_queue: bool = False,
                by_task: bool = False, by_ids: bool = False) -> Executable:
    """`cancel_job` for up to ``:limit`` jobs in `statuses` (pending, running or both) matching
    a bulk filter (`bulk_filter`)."""
    conditions = bulk_filter(table, statuses, by_queue=by_queue, by_task=by_task, by_ids=by_ids)
    return cancel_active(table, locked_targets(table, conditions, limit=True))


def cancel_active(table: Table, target: Any) -> Executable:
    """The cancel of `cancel_job` applied to the active rows `target` (a CTE of ids) locked. A
    waiting job is cancelled like a pending one; the jobs that depend on a job cancelled here
    are settled in the same statement (`dependencies.settled`)."""
    was_pending = status_is(table, JobStatus.PENDING, JobStatus.WAITING)
    now = func.clock_timestamp()
    changed = (
        update(table)
        .where(table.c.id == target.c.id)
        .values(
            status=case((was_pending, _literal(JobStatus.CANCELLED)), else_=table.c.status),
            cancelled_at=case((was_pending, now), else_=table.c.cancelled_at),
            cancel_requested_at=case(
                (was_pending, table.c.cancel_requested_at),
                else_=func.coalesce(table.c.cancel_requested_at, now),
            ),
        )
        .returning(*table.c)
        .cte("changed")
    )
    announcement = announce_finished(table, changed, only=changed.c.status == _literal(JobStatus.CANCELLED))
    return select(*changed.c).select_from(announced(settled(table, changed), announcement))


def _literal(status: JobStatus) -> ColumnElement[str]:
    return literal(status.value, literal_execute=True)


def job_state(table: Table) -> Executable:
    """Why an operator write found nothing: the row's status and key, if it exists."""
    return select(table.c.id, table.c.status, table.c.idempotency_key).where(
        table.c.id == bindparam("job_id")
    )


def active_key_holder(table: Table) -> Executable:
    """The active job holding ``:key``, if any."""
    return select(table.c.id).where(
        table.c.idempotency_key == bindparam("key"), status_is(table, *ACTIVE_STATUSES)
    )
