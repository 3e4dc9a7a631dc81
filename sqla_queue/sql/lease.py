"""Statements that keep or give back the leases of jobs a live worker holds."""

from __future__ import annotations

from sqlalchemy import BigInteger, Table, Text, bindparam, column, func, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql import Executable

from ..types import JobStatus
from ._predicates import status_is

RELEASED = "released unfinished at worker shutdown"


def _held_jobs(name: str):
    """``(id, token)`` pairs as a derived table: one statement covers every held job."""
    return (
        func.unnest(
            bindparam("job_ids", type_=ARRAY(BigInteger)), bindparam("tokens", type_=ARRAY(Text))
        )
        .table_valued(column("job_id", BigInteger), column("token", Text))
        .render_derived(name)
    )


def renew_leases(table: Table) -> Executable:
    """Heartbeat: restart the lease of every job still held under its own token.

    Each row is checked against its own token; the ids missing from RETURNING are lost claims.
    """
    held = _held_jobs("held")
    return (
        update(table)
        .where(
            table.c.id == held.c.job_id,
            status_is(table, JobStatus.RUNNING),
            table.c.claim_token == held.c.token,
        )
        .values(locked_at=func.clock_timestamp())
        .returning(table.c.id)
    )


def release_jobs(table: Table) -> Executable:
    """Give unfinished jobs back at shutdown: pending now, and the interrupted attempt is not
    counted (a deploy should not burn a job's attempts)."""
    held = _held_jobs("released")
    return (
        update(table)
        .where(
            table.c.id == held.c.job_id,
            status_is(table, JobStatus.RUNNING),
            table.c.claim_token == held.c.token,
        )
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
