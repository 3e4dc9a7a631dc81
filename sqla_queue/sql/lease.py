"""Statements that keep or give back the leases of jobs a live worker holds."""

from __future__ import annotations

from sqlalchemy import Table, func, update
from sqlalchemy.sql import Executable

from ..types import JobStatus
from ._predicates import held_in, held_pairs

RELEASED = "released unfinished at worker shutdown"


def renew_leases(table: Table) -> Executable:
    """Heartbeat: restart the lease of every job still held under its own token.

    Each row is checked against its own token; the ids missing from RETURNING are lost claims.
    """
    held = held_pairs("held")
    return (
        update(table)
        .where(held_in(table, held))
        .values(locked_at=func.clock_timestamp())
        .returning(table.c.id)
    )


def release_jobs(table: Table) -> Executable:
    """Give unfinished jobs back at shutdown: pending now, and the interrupted attempt is not
    counted (a deploy should not burn a job's attempts)."""
    held = held_pairs("released")
    return (
        update(table)
        .where(held_in(table, held))
        .values(
            status=JobStatus.PENDING.value,
            attempts=func.greatest(table.c.attempts - 1, 0),
            run_at=func.clock_timestamp(),
            locked_at=None,
            locked_by=None,
            claim_token=None,
            last_error=RELEASED,
        )
        .returning(table.c.id)
    )
