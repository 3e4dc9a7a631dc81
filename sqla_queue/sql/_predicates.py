"""Predicates shared by several statements."""

from __future__ import annotations

from sqlalchemy import ColumnElement, Table, and_, bindparam, literal

from ..types import JobStatus


def status_is(table: Table, *statuses: JobStatus) -> ColumnElement[bool]:
    """``status = 'x'`` with the value inlined at execution, never sent as a parameter.

    A partial index is only usable when the planner can prove, at plan time, that the query's
    predicate implies the index's; a parameter (generic plan) defeats that proof.
    """
    values = [literal(s.value, literal_execute=True) for s in statuses]
    return table.c.status == values[0] if len(values) == 1 else table.c.status.in_(values)


def held_by(table: Table, status: JobStatus = JobStatus.RUNNING) -> ColumnElement[bool]:
    """The fence every outcome uses: this job, in this state, under this claim token."""
    return and_(
        table.c.id == bindparam("job_id"),
        status_is(table, status),
        table.c.claim_token == bindparam("token"),
    )
