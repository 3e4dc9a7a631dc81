"""Predicates shared by several statements."""

from __future__ import annotations

from sqlalchemy import BigInteger, ColumnElement, Table, Text, and_, bindparam, column, false, func, literal, or_, true
from sqlalchemy.dialects.postgresql import ARRAY

from ..types import JobStatus


def status_is(table: Table, *statuses: JobStatus) -> ColumnElement[bool]:
    """``status = 'x'`` with the value inlined at execution, never sent as a parameter.

    A partial index is only usable when the planner can prove, at plan time, that the query's
    predicate implies the index's; a parameter (generic plan) defeats that proof.
    """
    values = [literal(s.value, literal_execute=True) for s in statuses]
    return table.c.status == values[0] if len(values) == 1 else table.c.status.in_(values)


def status_is_one_of(table: Table, *statuses: JobStatus) -> ColumnElement[bool]:
    """``status = 'x' OR status = 'y' ...``: for a statement that reads the rows of several
    states, each through its state's partial index (the active ones: waiting, pending claim,
    running expiry). `status_is`'s ``IN`` list matches only an index over all of them, and the
    active-key index holds keyed jobs alone."""
    return or_(*(status_is(table, status) for status in statuses))


def live(table: Table) -> ColumnElement[bool]:
    """``archived IS FALSE``: a row of the live partition. A statement that finds its rows by id
    says so, so that on a partitioned table (`sqla_queue.ops.storage`) PostgreSQL prunes the
    history at plan time instead of probing and locking every day partition; on a plain table
    every row passes."""
    return table.c.archived.is_(false())


def held_pairs(name: str, *, with_results: bool = False):
    """``(job_id, token)`` pairs from ``:job_ids`` and ``:tokens`` as a derived table, so one
    statement covers many held jobs while each row is still checked against its own token.
    `with_results` adds each job's ``result`` (JSON text or NULL) from ``:results``."""
    arrays = [bindparam("job_ids", type_=ARRAY(BigInteger)), bindparam("tokens", type_=ARRAY(Text))]
    columns = [column("job_id", BigInteger), column("token", Text)]
    if with_results:
        arrays.append(bindparam("results", type_=ARRAY(Text)))
        columns.append(column("result", Text))
    return func.unnest(*arrays).table_valued(*columns).render_derived(name)


def held_in(table: Table, pairs) -> ColumnElement[bool]:
    """The batch form of `held_by`: the row is one of `pairs`, running, under its own token.

    Each row is found by primary key from its pair. The running-jobs partial index keeps an
    entry for every job claimed since the last VACUUM, so a plan that reads the held rows
    through it (PostgreSQL 18 turns ``id = ANY(...)`` into a skip scan of it) walks all those
    dead entries every round and a long drain slows down as it goes. ``(status = 'running') IS
    TRUE`` says the same as ``status = 'running'`` for a NOT NULL column, but the planner cannot
    prove the partial index's predicate from it, so the primary key is the only index left."""
    running = status_is(table, JobStatus.RUNNING)
    return and_(
        table.c.id == pairs.c.job_id,
        running.is_(true()),
        live(table),
        table.c.claim_token == pairs.c.token,
    )


def held_by(table: Table, *statuses: JobStatus) -> ColumnElement[bool]:
    """The fence every outcome uses: this job, in this state (running unless told), under this
    claim token."""
    return and_(
        table.c.id == bindparam("job_id"),
        status_is(table, *(statuses or (JobStatus.RUNNING,))),
        table.c.claim_token == bindparam("token"),
    )
