"""Statements that keep or give back the leases of jobs a live worker holds."""

from __future__ import annotations

from sqlalchemy import Interval, Table, Text, bindparam, case, func, select, update
from sqlalchemy.sql import Executable

from ..types import JobStatus
from ._predicates import held_in, held_pairs
from .dependencies import settled

RELEASED = "released unfinished at worker shutdown"
RETURNED_UNTAKEN = "returned unstarted: no handler took it within the prefetch TTL"


def renew_leases(table: Table) -> Executable:
    """Heartbeat: restart the lease of every job still held under its own token, and say
    whether someone asked to cancel it (``cancel_requested``): how a cancel reaches the handler.

    The lease ends ``:lease`` from now on the database clock (``lease_expires_at``, what
    recovery reads); with ``:lease`` NULL, the claim's own length again (the time from
    ``locked_at`` to ``lease_expires_at`` before this renewal), so a renewal never shortens or
    stretches a lease it was not told about. Each row is checked against its own token; the ids
    missing from RETURNING are lost claims.
    """
    held = held_pairs("held")
    length = func.coalesce(bindparam("lease", type_=Interval), table.c.lease_expires_at - table.c.locked_at)
    return (
        update(table)
        .where(held_in(table, held))
        .values(locked_at=func.clock_timestamp(), lease_expires_at=func.clock_timestamp() + length)
        .returning(table.c.id, table.c.cancel_requested_at.is_not(None).label("cancel_requested"))
    )


def release_jobs(table: Table) -> Executable:
    """Give unfinished jobs back, saying why in ``:reason`` (`RELEASED` at shutdown,
    `RETURNED_UNTAKEN` from a prefetch buffer): pending now, and the interrupted attempt is not
    counted (a deploy should not burn a job's attempts). A job someone asked to cancel ends
    cancelled instead: it would never be wanted again, and the jobs waiting for it are settled
    in the same statement (`dependencies.settled`). Returns each row's queue, task and attempts
    too, for the cancelled ones' events."""
    held = held_pairs("released")
    cancelling = table.c.cancel_requested_at.is_not(None)

    released = (
        update(table)
        .where(held_in(table, held))
        .values(
            status=case((cancelling, JobStatus.CANCELLED.value), else_=JobStatus.PENDING.value),
            cancelled_at=case((cancelling, func.clock_timestamp()), else_=None),
            attempts=case((cancelling, table.c.attempts), else_=func.greatest(table.c.attempts - 1, 0)),
            run_at=case((cancelling, table.c.run_at), else_=func.clock_timestamp()),
            locked_at=None,
            lease_expires_at=None,
            locked_by=None,
            claim_token=None,
            last_error=bindparam("reason", type_=Text),
        )
        .returning(table.c.id, table.c.status, table.c.dependents, table.c.queue_name, table.c.task, table.c.attempts)
        .cte("released_now")
    )
    return (select(released.c.id, released.c.status, released.c.queue_name, released.c.task, released.c.attempts)
            .select_from(settled(table, released)))
