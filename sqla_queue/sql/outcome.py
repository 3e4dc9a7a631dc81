"""Guarded outcomes: complete, retry, fail and snooze a job this worker still holds.

Each statement updates only ``id = :job_id AND status = 'running' AND claim_token =
:token``. Zero rows means the claim was lost (recovered, reclaimed, or changed by an
operator) and the caller must report that, never success.

Each is also safe to replay: the update runs in a data-modifying CTE and the outer query
UNIONs it with the row as the statement's snapshot saw it *before* the update. When a previous
call with the same token already committed (its reply was lost), the CTE updates nothing but the
second branch finds the finished row still carrying that token, so the replay reports the same
result instead of a lost claim. Both branches can never match at once: the snapshot predates the
CTE's own update. The ``replayed`` column says which branch a row came from: a replay committed
nothing, so it fires no lifecycle event.

A cancel request (``cancel_requested_at``, set by `Queue.cancel` on a running job) turns every
outcome into ``cancelled``: whatever the handler did, the job ends there and is never retried.
The request and the outcome lock the same row, so exactly one of them decides: a cancel that
comes after the outcome finds the job finished and is refused. Statements that finish jobs
announce them on the table's finished channel (`notify.announce_finished`).
"""

from __future__ import annotations

from sqlalchemy import Table, Text, bindparam, case, cast, false, func, select, true, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql import Executable

from ..types import JobStatus
from ._predicates import held_by, held_in, held_pairs, status_is
from .dependencies import NOTHING_TO_SETTLE, settle_again, settled
from .notify import announce_finished, announced


def complete_job(table: Table) -> Executable:
    """``locked_at``/``locked_by`` stay on the finished row: they say which claim finished it
    and give the claim-to-completion duration. ``:result`` is the handler's return value as JSON
    text (NULL for none), stored in the same update."""
    done = (
        update(table)
        .where(held_by(table))
        .values(**_completion(table, bindparam("result", type_=Text)))
        .returning(*_completed_columns(table))
        .cte("completed_now")
    )
    replay = select(*_completed_columns(table), true().label("replayed"), NOTHING_TO_SETTLE).where(
        held_by(table, JobStatus.COMPLETED, JobStatus.CANCELLED)
    )
    return _announcing(table, done).union_all(replay)


def complete_in_handler_transaction(table: Table) -> Executable:
    """The completion ``ctx.transaction()`` runs in the handler's own transaction, so that the
    handler's writes and the job's completion commit together: only while this claim holds the
    job and nobody asked to cancel it (a cancelled job's writes must not commit either). No
    replay branch: that transaction commits once or not at all."""
    done = (
        update(table)
        .where(held_by(table), table.c.cancel_requested_at.is_(None))
        .values(status=JobStatus.COMPLETED.value, completed_at=func.clock_timestamp(),
                result=cast(bindparam("result", type_=Text), JSONB))
        .returning(*_completed_columns(table))
        .cte("completed_now")
    )
    return _announcing(table, done)


def complete_jobs(table: Table) -> Executable:
    """Complete many held jobs in one statement (the worker's hot path); each row is checked
    against its own token and stores its own ``result`` from ``:results``. Ids missing from
    RETURNING are replays or lost claims: the caller settles those one by one with
    `complete_job`, which tells them apart. A bare UPDATE for `complete_and_claim_jobs` to
    embed; `complete_jobs_announced` is the statement on its own."""
    held = held_pairs("finished", with_results=True)
    return (
        update(table)
        .where(held_in(table, held))
        .values(**_completion(table, held.c.result))
        .returning(*_completed_columns(table))
    )


def complete_jobs_announced(table: Table) -> Executable:
    done = complete_jobs(table).cte("completed_now")
    return _announcing(table, done)


def retry_job(table: Table) -> Executable:
    """Back to pending at ``coalesce(:retry_at, clock_timestamp() + :delay)`` if attempts remain,
    else terminal failed (cancelled if a cancel was requested). ``:error`` and ``:traceback``
    must already be sanitized and bounded (`sqla_queue._sanitize`); ``:traceback`` is NULL when
    the error was given as a string."""
    has_attempts_left = table.c.attempts < table.c.max_attempts
    cancelling = table.c.cancel_requested_at.is_not(None)
    retrying = has_attempts_left & ~cancelling
    next_run = func.coalesce(bindparam("retry_at"), func.clock_timestamp() + bindparam("delay"))
    retried = (
        update(table)
        .where(held_by(table))
        .values(
            status=case((cancelling, JobStatus.CANCELLED.value), (has_attempts_left, JobStatus.PENDING.value),
                        else_=JobStatus.FAILED.value),
            run_at=case((retrying, next_run), else_=table.c.run_at),
            locked_at=case((retrying, None), else_=table.c.locked_at),
            lease_expires_at=case((retrying, None), else_=table.c.lease_expires_at),
            locked_by=case((retrying, None), else_=table.c.locked_by),
            failed_at=case((cancelling | has_attempts_left, None), else_=func.clock_timestamp()),
            cancelled_at=case((cancelling, func.clock_timestamp()), else_=None),
            last_error=bindparam("error"),
            last_traceback=bindparam("traceback"),
        )
        .returning(*_retried_columns(table))
        .cte("retried_now")
    )
    replay = select(*_retried_columns(table), true().label("replayed"), NOTHING_TO_SETTLE).where(
        table.c.id == bindparam("job_id"),
        table.c.claim_token == bindparam("token"),
        status_is(table, JobStatus.PENDING, JobStatus.FAILED, JobStatus.CANCELLED),
    )
    return _announcing(table, retried, only=retried.c.status != JobStatus.PENDING.value).union_all(replay)


def fail_job(table: Table) -> Executable:
    cancelling = table.c.cancel_requested_at.is_not(None)
    failed = (
        update(table)
        .where(held_by(table))
        .values(
            status=case((cancelling, JobStatus.CANCELLED.value), else_=JobStatus.FAILED.value),
            failed_at=case((cancelling, None), else_=func.clock_timestamp()),
            cancelled_at=case((cancelling, func.clock_timestamp()), else_=None),
            last_error=bindparam("error"), last_traceback=bindparam("traceback"),
        )
        .returning(*_retried_columns(table))
        .cte("failed_now")
    )
    replay = select(*_retried_columns(table), true().label("replayed"), NOTHING_TO_SETTLE).where(
        held_by(table, JobStatus.FAILED, JobStatus.CANCELLED)
    )
    return _announcing(table, failed).union_all(replay)


def snooze_job(table: Table) -> Executable:
    """Back to pending at ``clock_timestamp() + :delay`` with the attempt handed back (the claim
    counted it) and ``snoozes`` one higher; cancelled instead if a cancel was requested. The
    claim token stays, so a replay finds the row as this call left it."""
    cancelling = table.c.cancel_requested_at.is_not(None)
    snoozed = (
        update(table)
        .where(held_by(table))
        .values(
            status=case((cancelling, JobStatus.CANCELLED.value), else_=JobStatus.PENDING.value),
            run_at=case((cancelling, table.c.run_at), else_=func.clock_timestamp() + bindparam("delay")),
            attempts=case((cancelling, table.c.attempts), else_=func.greatest(table.c.attempts - 1, 0)),
            snoozes=case((cancelling, table.c.snoozes), else_=table.c.snoozes + 1),
            locked_at=case((cancelling, table.c.locked_at), else_=None),
            lease_expires_at=case((cancelling, table.c.lease_expires_at), else_=None),
            locked_by=case((cancelling, table.c.locked_by), else_=None),
            cancelled_at=case((cancelling, func.clock_timestamp()), else_=None),
        )
        .returning(*_retried_columns(table), table.c.snoozes)
        .cte("snoozed_now")
    )
    replay = select(*_retried_columns(table), table.c.snoozes, true().label("replayed"), NOTHING_TO_SETTLE).where(
        table.c.id == bindparam("job_id"),
        table.c.claim_token == bindparam("token"),
        status_is(table, JobStatus.PENDING, JobStatus.CANCELLED),
    )
    return _announcing(table, snoozed, only=snoozed.c.status != JobStatus.PENDING.value).union_all(replay)


def _completion(table: Table, result) -> dict:
    """Completed with its result, or cancelled when a cancel was requested meanwhile."""
    cancelling = table.c.cancel_requested_at.is_not(None)
    return {
        "status": case((cancelling, JobStatus.CANCELLED.value), else_=JobStatus.COMPLETED.value),
        "completed_at": case((cancelling, None), else_=func.clock_timestamp()),
        "cancelled_at": case((cancelling, func.clock_timestamp()), else_=None),
        "result": case((cancelling, None), else_=cast(result, JSONB)),
    }


def _announcing(table: Table, rows, *, only=None):
    """``SELECT rows.*, false AS replayed`` that also announces the finished ones and settles
    their dependents (`dependencies.settled`), saying which need settling again."""
    joined = settled(table, rows)
    return select(*rows.c, false().label("replayed"), settle_again(joined)).select_from(
        announced(joined, announce_finished(table, rows, only=only))
    )


def _identity_columns(table: Table) -> tuple:
    return (table.c.id, table.c.queue_name, table.c.task, table.c.attempts, table.c.max_attempts)


def _completed_columns(table: Table) -> tuple:
    duration = (table.c.completed_at - table.c.locked_at).label("duration")
    return (*_identity_columns(table), duration, table.c.status, table.c.watched, table.c.dependents)


def _retried_columns(table: Table) -> tuple:
    return (*_identity_columns(table), table.c.status, table.c.run_at, table.c.last_error, table.c.watched,
            table.c.dependents)
