"""Reads of single jobs."""

from __future__ import annotations

from sqlalchemy import Table, bindparam, select
from sqlalchemy.sql import Executable


def select_job(table: Table) -> Executable:
    return select(table).where(table.c.id == bindparam("job_id"))


def claim_state(table: Table) -> Executable:
    """What a lost claim finds instead: used only on the rare lost-claim path, to say why."""
    return select(table.c.status, table.c.claim_token, table.c.last_error).where(
        table.c.id == bindparam("job_id")
    )
