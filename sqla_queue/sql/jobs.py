"""Reads of single jobs."""

from __future__ import annotations

from sqlalchemy import Table, bindparam, select, true, update
from sqlalchemy.sql import Executable

from ..types import ACTIVE_STATUSES
from ._predicates import status_is


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
