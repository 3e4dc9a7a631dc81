"""Guarded outcomes: complete, retry and fail a job this worker still holds.

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
"""

from __future__ import annotations

from sqlalchemy import Table, bindparam, case, false, func, select, true, update
from sqlalchemy.sql import Executable

from ..types import JobStatus
from ._predicates import held_by, held_in, held_pairs, status_is


def complete_job(table: Table) -> Executable:
    """``locked_at``/``locked_by`` stay on the finished row: they say which claim finished it
    and give the claim-to-completion duration."""
    done = (
        update(table)
        .where(held_by(table))
        .values(status=JobStatus.COMPLETED.value, completed_at=func.clock_timestamp())
        .returning(*_completed_columns(table))
        .cte("completed_now")
    )
    replay = select(*_completed_columns(table), true().label("replayed")).where(
        held_by(table, JobStatus.COMPLETED)
    )
    return select(*done.c, false().label("replayed")).union_all(replay)


def complete_jobs(table: Table) -> Executable:
    """Complete many held jobs in one statement (the worker's hot path); each row is checked
    against its own token. Ids missing from RETURNING are replays or lost claims: the caller
    settles those one by one with `complete_job`, which tells them apart."""
    held = held_pairs("finished")
    return (
        update(table)
        .where(held_in(table, held))
        .values(status=JobStatus.COMPLETED.value, completed_at=func.clock_timestamp())
        .returning(*_completed_columns(table))
    )


def retry_job(table: Table) -> Executable:
    """Back to pending at ``coalesce(:retry_at, clock_timestamp() + :delay)`` if attempts remain,
    else terminal failed. ``:error`` and ``:traceback`` must already be sanitized and bounded
    (`sqla_queue._sanitize`); ``:traceback`` is NULL when the error was given as a string."""
    has_attempts_left = table.c.attempts < table.c.max_attempts
    next_run = func.coalesce(bindparam("retry_at"), func.clock_timestamp() + bindparam("delay"))
    still_pending = (has_attempts_left, JobStatus.PENDING.value)
    retried = (
        update(table)
        .where(held_by(table))
        .values(
            status=case(still_pending, else_=JobStatus.FAILED.value),
            run_at=case((has_attempts_left, next_run), else_=table.c.run_at),
            locked_at=case((has_attempts_left, None), else_=table.c.locked_at),
            locked_by=case((has_attempts_left, None), else_=table.c.locked_by),
            failed_at=case((has_attempts_left, None), else_=func.clock_timestamp()),
            last_error=bindparam("error"),
            last_traceback=bindparam("traceback"),
        )
        .returning(*_retried_columns(table))
        .cte("retried_now")
    )
    replay = select(*_retried_columns(table), true().label("replayed")).where(
        table.c.id == bindparam("job_id"),
        table.c.claim_token == bindparam("token"),
        status_is(table, JobStatus.PENDING, JobStatus.FAILED),
    )
    return select(*retried.c, false().label("replayed")).union_all(replay)


def fail_job(table: Table) -> Executable:
    failed = (
        update(table)
        .where(held_by(table))
        .values(
            status=JobStatus.FAILED.value, failed_at=func.clock_timestamp(),
            last_error=bindparam("error"), last_traceback=bindparam("traceback"),
        )
        .returning(*_retried_columns(table))
        .cte("failed_now")
    )
    replay = select(*_retried_columns(table), true().label("replayed")).where(
        held_by(table, JobStatus.FAILED)
    )
    return select(*failed.c, false().label("replayed")).union_all(replay)


def _identity_columns(table: Table) -> tuple:
    return (table.c.id, table.c.queue_name, table.c.task, table.c.attempts, table.c.max_attempts)


def _completed_columns(table: Table) -> tuple:
    duration = (table.c.completed_at - table.c.locked_at).label("duration")
    return (*_identity_columns(table), duration)


def _retried_columns(table: Table) -> tuple:
    return (*_identity_columns(table), table.c.status, table.c.run_at, table.c.last_error)
