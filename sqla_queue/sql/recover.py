"""Lease recovery: running jobs whose lease expired, in bounded SKIP LOCKED batches.

Three statements, because the terminal transitions are kept explicit: jobs with attempts left
go back to pending; jobs that expired on their last attempt go to failed; jobs someone asked to
cancel go to cancelled whatever their attempts. Both clear the claim
token, so the expired worker's late outcome finds nothing and reports a lost claim.

A job is expired when its holder's lease has run out: ``lease_expires_at``, which the claim and
every renewal set from the claiming worker's own lease (revision sqlaq_0008), is in the past on
the database's clock. The recovering process's lease does not enter into it, so a recoverer with
a shorter lease than the holder's (a rolling deploy that changes ``--lease``, ``sqla-queue
recover`` with its default) takes back nothing live. Only a running row claimed before that
revision has no lease end; for it ``:lease`` is the fallback (``locked_at < clock_timestamp() -
:lease``). SKIP LOCKED lets a
sweep run beside claims, outcomes and other sweeps (several workers recover at once) without
waiting on any of them.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, Interval, Table, and_, bindparam, func, or_, select, update
from sqlalchemy.sql import Executable

from ..types import JobStatus
from ._predicates import live, status_is
from .dependencies import settled

LEASE_EXPIRED = "claim lease expired"
LEASE_EXPIRED_LAST_ATTEMPT = "claim lease expired on the last attempt"
LEASE_EXPIRED_CANCELLED = "claim lease expired after a cancel request"


def requeue_expired(table: Table) -> Executable:
    return _take_back_update(
        table, _expired(table, table.c.attempts < table.c.max_attempts, "expired_jobs"),
        status=JobStatus.PENDING.value, run_at=func.clock_timestamp(), locked_at=None, locked_by=None,
        lease_expires_at=None,
        last_error=LEASE_EXPIRED,
    )


def fail_exhausted_expired(table: Table) -> Executable:
    return _take_back(
        table, _expired(table, table.c.attempts >= table.c.max_attempts, "exhausted_jobs"),
        status=JobStatus.FAILED.value, failed_at=func.clock_timestamp(), locked_at=None, locked_by=None,
        lease_expires_at=None,
        last_error=LEASE_EXPIRED_LAST_ATTEMPT,
    )


def cancel_expired(table: Table) -> Executable:
    """``locked_at``/``locked_by`` stay, as on every cancelled row: the claim it ended under."""
    return _take_back(
        table, _expired(table, None, "cancelled_jobs"),
        status=JobStatus.CANCELLED.value, cancelled_at=func.clock_timestamp(),
        last_error=LEASE_EXPIRED_CANCELLED,
    )


def _take_back_update(table: Table, expired, **values):
    """The expired jobs updated with `values`, their claim token cleared (so the expired
    worker's late outcome is a lost claim) and the last traceback with it."""
    return (
        update(table)
        .where(table.c.id == expired.c.id, live(table))
        .values(**values, claim_token=None, last_traceback=None)
        .returning(table.c.id, table.c.queue_name, table.c.task)
    )


def _take_back(table: Table, expired, **values) -> Executable:
    """`_take_back_update` for jobs that end failed or cancelled here: their dependents are
    settled in the same statement (`dependencies.settled`)."""
    taken = (
        _take_back_update(table, expired, **values)
        .returning(table.c.status, table.c.dependents)
        .cte(f"{expired.name}_taken")
    )
    return select(taken.c.id, taken.c.queue_name, taken.c.task).select_from(settled(table, taken))


def lease_expired(table: Table) -> ColumnElement[bool]:
    """The holder's lease is over: ``lease_expires_at`` has passed, or, on a row claimed before
    revision sqlaq_0008 (no lease end), ``locked_at`` is more than ``:lease`` ago. Each arm is a
    range on a partial index of running jobs (``running_expiry_idx``; ``running_unleased_idx``,
    which holds only the rows without a lease end, since sqlaq_0009);
    with few running rows the planner reads one of them whole and filters, never the table."""
    now = func.clock_timestamp()
    return or_(
        table.c.lease_expires_at < now,
        and_(table.c.lease_expires_at.is_(None),
             table.c.locked_at < now - bindparam("lease", type_=Interval)),
    )


def _expired(table: Table, attempts_rule: ColumnElement[bool] | None, name: str):
    """Expired running jobs: without a cancel request and matching `attempts_rule`, or (None)
    with one."""
    cancelled = table.c.cancel_requested_at.is_not(None)
    return (
        select(table.c.id)
        .where(
            status_is(table, JobStatus.RUNNING),
            lease_expired(table),
            cancelled if attempts_rule is None else (~cancelled & attempts_rule),
        )
        .order_by(table.c.lease_expires_at, table.c.locked_at, table.c.id)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
        .cte(name)
    )
