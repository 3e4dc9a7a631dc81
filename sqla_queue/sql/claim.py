"""The claim: one statement that picks due jobs and marks them running."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    DateTime,
    Integer,
    Table,
    bindparam,
    cast,
    false,
    func,
    literal_column,
    null,
    select,
    true,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import INTERVAL
from sqlalchemy.sql import Executable

from ..types import JobStatus
from ._predicates import status_is
from .outcome import complete_jobs


def claim_jobs(table: Table, *, from_position: bool = False) -> Executable:
    """Claim up to ``:limit`` due jobs of ``:queue`` for ``:worker_id`` under ``:token``.

    The row selection lives in a CTE with ``FOR UPDATE SKIP LOCKED``: the CTE is an optimization
    fence, so the LIMIT is applied exactly once to the locked set. A bare
    ``WHERE id IN (SELECT ... LIMIT n)`` may be re-planned as a join and lock or update more
    rows than asked for. The locking clause must sit inside the CTE: a lock on the outer query
    does not reach into a WITH query.

    Ordering by ``run_at, id`` is a preference, not a promise: SKIP LOCKED passes over rows
    another claim holds, so fairness is approximate (docs/explanation/delivery-semantics.md).
    ``clock_timestamp()`` makes the database's clock, not the worker's, decide what is due.

    The LIMIT is inlined at execution (one prepared statement per batch size): with a
    parameter there, PostgreSQL's generic plan guesses a tenth of the queue is wanted and
    updates the claimed rows through a hash join over a sequential scan of the whole table, so
    it keeps re-planning the statement on every execution to avoid that plan.

    `from_position` adds ``(run_at, id) >= (:from_run_at, :from_id)``, an index condition
    that starts the scan at a position in claim order instead of at the head of the pending
    index. Claimed rows leave dead entries at that head until VACUUM removes them; a claim that
    always starts there reads all of them, and slows down as a backlog drains (see
    `complete_and_claim_jobs`).
    """
    conditions = [
        table.c.queue_name == bindparam("queue"),
        status_is(table, JobStatus.PENDING),
        table.c.run_at <= func.clock_timestamp(),
        table.c.attempts < table.c.max_attempts,
    ]
    if from_position:
        # NULL (no position) means the start of the claim order.
        position = (
            func.coalesce(bindparam("from_run_at", type_=DateTime(timezone=True)),
                          literal_column("'-infinity'::timestamptz")),
            func.coalesce(bindparam("from_id", type_=BigInteger), 0),
        )
        conditions.append(tuple_(table.c.run_at, table.c.id) >= tuple_(*position))
    due = (
        select(table.c.id)
        .where(*conditions)
        .order_by(table.c.run_at, table.c.id)
        .limit(bindparam("limit", type_=Integer, literal_execute=True))
        .with_for_update(skip_locked=True)
        .cte("due_jobs")
    )
    return (
        update(table)
        .where(table.c.id == due.c.id)
        .values(
            status=JobStatus.RUNNING.value,
            attempts=table.c.attempts + 1,
            locked_at=func.clock_timestamp(),
            locked_by=bindparam("worker_id"),
            claim_token=bindparam("token"),
            last_error=None,
            last_traceback=None,
        )
        .returning(
            table.c.id,
            table.c.task,
            table.c.payload,
            table.c.attempts,
            table.c.max_attempts,
            table.c.claim_token,
            table.c.queue_name,
            table.c.idempotency_key,
            table.c.locked_at,
            table.c.run_at,
        )
    )


def complete_and_claim_jobs(table: Table) -> Executable:
    """The worker's round in one statement: complete the finished jobs (``:job_ids`` under
    their own ``:tokens``) and claim up to ``:limit`` more, as `complete_jobs` and `claim_jobs`
    would.

    One statement is one round trip and, run on its own (autocommit), one commit: the whole
    database cost of a round. The claim starts at ``(:from_run_at, :from_id)`` (see
    `claim_jobs`): a worker passes the position of its previous claim while it is working
    through a backlog, so each claim skips the dead index entries its predecessors left, and
    the start of the claim order (``'-infinity'``) now and then to pick up anything that became
    due behind that position (NULL). Rows come back tagged by ``claimed``: false rows are completions
    (with ``duration``), true rows are claims (with the payload). The two halves touch disjoint
    rows (running vs pending), so sharing a snapshot changes nothing for either.
    """
    completed = complete_jobs(table).cte("completed_now")
    claimed = claim_jobs(table, from_position=True).cte("claimed_now")
    only_claims = ("payload", "claim_token", "idempotency_key", "locked_at", "run_at")
    return select(
        false().label("claimed"), *_identity(completed), completed.c.duration,
        *(cast(null(), table.c[name].type).label(name) for name in only_claims),
    ).union_all(
        select(
            true().label("claimed"), *_identity(claimed), cast(null(), INTERVAL).label("duration"),
            *(claimed.c[name] for name in only_claims),
        )
    )


def _identity(rows) -> tuple:
    return (rows.c.id, rows.c.queue_name, rows.c.task, rows.c.attempts, rows.c.max_attempts)
