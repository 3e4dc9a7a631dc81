"""Lease recovery: running jobs whose lease expired, in bounded SKIP LOCKED batches.

Two statements, because the terminal transition is kept explicit: jobs with attempts left
go back to pending; jobs that expired on their last attempt go to failed. Both clear the claim
token, so the expired worker's late outcome finds nothing and reports a lost claim.
``clock_timestamp() - :lease`` keeps the cutoff on the database's clock. SKIP LOCKED lets a
sweep run beside claims, outcomes and other sweeps (several workers recover at once) without
waiting on any of them.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, Table, bindparam, func, select, update
from sqlalchemy.sql import Executable

from ..types import JobStatus
from ._predicates import status_is

LEASE_EXPIRED = "claim lease expired"
LEASE_EXPIRED_LAST_ATTEMPT = "claim lease expired on the last attempt"


def requeue_expired(table: Table) -> Executable:
    expired = _expired(table, table.c.attempts < table.c.max_attempts, "expired_jobs")
    return (
        update(table)
        .where(table.c.id == expired.c.id)
        .values(
            status=JobStatus.PENDING.value,
            run_at=func.clock_timestamp(),
            locked_at=None,
            locked_by=None,
            claim_token=None,
            last_error=LEASE_EXPIRED,
            last_traceback=None,
        )
        .returning(table.c.id, table.c.queue_name, table.c.task)
    )


def fail_exhausted_expired(table: Table) -> Executable:
    expired = _expired(table, table.c.attempts >= table.c.max_attempts, "exhausted_jobs")
    return (
        update(table)
        .where(table.c.id == expired.c.id)
        .values(
            status=JobStatus.FAILED.value,
            failed_at=func.clock_timestamp(),
            locked_at=None,
            locked_by=None,
            claim_token=None,
            last_error=LEASE_EXPIRED_LAST_ATTEMPT,
            last_traceback=None,
        )
        .returning(table.c.id, table.c.queue_name, table.c.task)
    )


def _expired(table: Table, attempts_rule: ColumnElement[bool], name: str):
    return (
        select(table.c.id)
        .where(
            status_is(table, JobStatus.RUNNING),
            table.c.locked_at < func.clock_timestamp() - bindparam("lease"),
            attempts_rule,
        )
        .order_by(table.c.locked_at, table.c.id)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
        .cte(name)
    )
