"""The claim: one statement that picks due jobs and marks them running, in the order of a
`ClaimOrder` (`sql.claim.order`)."""

from __future__ import annotations

from sqlalchemy import (
    ARRAY,
    BigInteger,
    DateTime,
    Integer,
    Interval,
    Table,
    Text,
    any_,
    bindparam,
    cast,
    column,
    exists,
    false,
    func,
    null,
    or_,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import INTERVAL
from sqlalchemy.sql import CompoundSelect, Executable, Select
from sqlalchemy.sql.elements import BindParameter, ColumnElement
from sqlalchemy.sql.visitors import iterate, replacement_traverse

from ...tables import queues_table
from ...types import JobStatus
from .._predicates import live, status_is
from ..dependencies import NOTHING_TO_SETTLE, settle_again, settled
from ..notify import announce_finished, announced
from ..outcome import complete_jobs
from .order import DEFAULT_ORDER, ClaimOrder, PriorityOrder

__all__ = [
    "DEFAULT_ORDER",
    "ClaimOrder",
    "PriorityOrder",
    "claim_job_by_id",
    "claim_jobs",
    "claim_served_jobs",
    "claimed_update",
    "complete_and_claim_jobs",
    "registered_task",
]


def claim_jobs(table: Table, *, from_position: bool = False, order: ClaimOrder = DEFAULT_ORDER) -> Executable:
    """Claim up to ``:limit`` due jobs of ``:queue`` for ``:worker_id`` under ``:token`` and a
    lease of ``:lease`` (an interval: ``lease_expires_at``, which recovery reads), highest
    priority first, unless the queue is paused.

    The row selection lives in a CTE with ``FOR UPDATE SKIP LOCKED``: the CTE is an optimization
    fence, so the LIMIT is applied exactly once to the locked set. A bare
    ``WHERE id IN (SELECT ... LIMIT n)`` may be re-planned as a join and lock or update more
    rows than asked for. The locking clause must sit inside the CTE: a lock on the outer query
    does not reach into a WITH query.

    Ordering by `order` (by default ``priority DESC, run_at, id``: the pending index's key
    order, so no sort) is a preference, not a promise: SKIP LOCKED passes over rows
    another claim holds, so fairness is approximate (docs/explanation/delivery-semantics.md).
    ``clock_timestamp()`` makes the database's clock, not the worker's, decide what is due.

    The LIMIT is inlined at execution (one prepared statement per batch size): with a
    parameter there, PostgreSQL's generic plan guesses a tenth of the queue is wanted (when the
    UPDATE was still joined to the CTE, it then hashed the whole table and re-planned the
    statement on every execution to avoid that plan). The UPDATE finds the claimed rows by
    primary key from an array of their ids (`by_id_from`).

    `from_position` adds the order's position conditions (for `PriorityOrder`, ``priority =
    :from_priority AND (run_at, id) >= (:from_run_at, :from_id)``), index conditions that start
    the scan at a position in claim order instead of at the head of the pending index. Claimed
    rows leave dead entries at that head until VACUUM removes them; a claim that always starts
    there reads all of them, and slows down as a backlog drains (see
    `complete_and_claim_jobs`).

    A paused queue (a ``paused_at`` in the queues table) claims nothing: the check is an
    uncorrelated primary-key lookup that PostgreSQL runs once per statement, before any row is
    read, so every worker honours a pause from its next claim on.
    """
    conditions = [
        table.c.queue_name == bindparam("queue"),
        status_is(table, JobStatus.PENDING),
        table.c.run_at <= func.clock_timestamp(),
        table.c.attempts < table.c.max_attempts,
        not_paused(table),
    ]
    if from_position:
        conditions.extend(order.position_conditions(table))
    due = (
        select(table.c.id)
        .where(*conditions)
        .order_by(*order.order_by(table))
        .limit(bindparam("limit", type_=Integer, literal_execute=True))
        .with_for_update(skip_locked=True)
        .cte("due_jobs")
    )
    return claimed_update(table, by_id_from(table, select(due.c.id)))


def claim_served_jobs(table: Table, *, from_position: bool = False, order: ClaimOrder = DEFAULT_ORDER) -> Executable:
    """The worker's claim: up to ``:limit`` due jobs over every queue in ``:queues`` (a list, in
    the turn the worker takes them this round) whose task is in ``:tasks`` (NULL: any task),
    for ``:worker_id`` under ``:token`` and ``:lease``, as `claim_jobs` claims from one queue.

    One statement for every queue a worker serves, so an idle worker's cost does not grow with
    their number. Each queue is read by a LATERAL subquery that walks its part of the pending
    index in claim order (``FOR UPDATE SKIP LOCKED``, at most ``:limit``), and the outer LIMIT
    stops pulling rows once it has ``:limit``: PostgreSQL runs the queues in the list's order and
    reads (and locks) no row of a queue it does not reach. The first queue takes what it can and
    the next get what is left, so the worker rotates the list's start each round, as it rotated
    its statements per queue before: one busy queue cannot starve the others. A paused queue
    (`not_paused`) is passed over before its index is read.

    The task condition lets a worker claim only what it can run: during a rolling deploy a job
    of a task only the new code registers stays pending for a worker that registers it, instead
    of failing on an old one. It filters rows the index scan returns; only jobs of unregistered
    tasks ahead in a queue's order cost a heap visit each.

    `from_position` adds one position per queue (the order's ``:from_*`` parameters, each now a
    list aligned with ``:queues``, NULL for a queue read from its head), as `claim_jobs`'
    `from_position` does for one queue: the subquery is then a UNION ALL of the read from the
    head (for a queue without a position) and the reads from the position (for one with;
    `position_reads`: for `PriorityOrder` the higher priorities, the position's priority from
    the position on, the lower priorities), each branch an index scan that the NULLs of the
    others make empty at once.
    """
    served = _served(table, order if from_position else None)
    common = [
        table.c.queue_name == served.c.queue_name,
        status_is(table, JobStatus.PENDING),
        table.c.run_at <= func.clock_timestamp(),
        table.c.attempts < table.c.max_attempts,
        registered_task(table),
        # Only the outer row's queue in it: a gate (One-Time Filter) checked before the queue's
        # index is read. In the outer WHERE the planner makes it an anti-join, which may hash
        # the served queues and so lose their order.
        ~_paused(table, served.c.queue_name, outer=served),
    ]
    if from_position:
        keys = [bind.key for bind in _position_binds(order, table)]

        def per_queue(conditions: list) -> list:
            return [replacement_traverse(condition, {}, lambda element: (
                served.c[element.key] if isinstance(element, BindParameter) and element.key in keys else None
            )) for condition in conditions]

        # Each branch is a subquery of its own (PostgreSQL refuses FOR UPDATE in a UNION's
        # branches), correlated to ``served`` two levels up; PostgreSQL reads them in turn.
        branches = {"from_head": [served.c[keys[0]].is_(None)],
                    **{name: per_queue(conditions) for name, conditions in position_reads(order, table).items()}}
        reads = [_due_in_order(table, order, [*common, *conditions]).correlate(served).subquery(name)
                 for name, conditions in branches.items()]
        picked = union_all(*(select(read.c.id) for read in reads)).subquery().lateral("picked")
    else:
        picked = _due_in_order(table, order, common).lateral("picked")
    due = (
        select(picked.c.id)
        .select_from(served.join(picked, true()))
        .limit(_limit())
        .cte("due_jobs")
    )
    return claimed_update(table, by_id_from(table, select(due.c.id)))


def by_id_from(table: Table, ids: Select | CompoundSelect) -> ColumnElement[bool]:
    """The rows whose ids `ids` selects, looked up by primary key from an array: joined to the
    CTE that picked them instead, the planner (which cannot see how few rows it holds) may hash
    a small or middling job table whole, a sequential scan per claim."""
    return table.c.id == any_(func.array(ids.scalar_subquery()))


def _due_in_order(table: Table, order: ClaimOrder, conditions: list) -> Select:
    """Due jobs meeting `conditions`, in claim order, locked as read: at most ``:limit``."""
    return (
        select(table.c.id)
        .where(*conditions)
        .order_by(*order.order_by(table))
        .limit(_limit())
        .with_for_update(skip_locked=True)
    )


def _limit():
    return bindparam("limit", type_=Integer, literal_execute=True)


def _served(table: Table, order: ClaimOrder | None):
    """``:queues`` as rows (``queue_name``), with the position parameters of `order` (each a
    list aligned with ``:queues``) as further columns."""
    arrays = [bindparam("queues", type_=ARRAY(Text))]
    columns = [column("queue_name", Text)]
    for bind in () if order is None else _position_binds(order, table):
        arrays.append(bindparam(bind.key, type_=ARRAY(bind.type)))
        columns.append(column(bind.key, bind.type))
    return func.unnest(*arrays).table_valued(*columns).render_derived("served")


def position_reads(order: ClaimOrder, table: Table) -> dict[str, list]:
    """A claim from a position's reads, in claim order: the order's optional
    ``before_position_conditions``, its `position_conditions`, its optional
    ``after_position_conditions``."""
    reads = {}
    for name in ("before_position", "position", "after_position"):
        conditions = getattr(order, f"{name}_conditions", None)
        if conditions is not None:
            reads[f"from_{name}" if name == "position" else name] = list(conditions(table))
    return reads


def reads_around_position(order: ClaimOrder) -> bool:
    """Whether a claim of `order` from a position also reads what lies beyond its reach
    (`position_reads`): then one that comes up short has seen every due job but those behind
    its position."""
    return all(getattr(order, f"{side}_position_conditions", None) is not None for side in ("before", "after"))


def _position_binds(order: ClaimOrder, table: Table) -> list[BindParameter]:
    """The parameters of `order`'s position conditions, once each, in order of appearance."""
    found: dict[str, BindParameter] = {}
    for condition in (c for conditions in position_reads(order, table).values() for c in conditions):
        for element in iterate(condition):
            if isinstance(element, BindParameter):
                found.setdefault(element.key, element)
    return list(found.values())


def registered_task(table: Table):
    """The job's task is one of ``:tasks``, or ``:tasks`` is NULL (any task)."""
    tasks = bindparam("tasks", type_=ARRAY(Text))
    return or_(tasks.is_(None), table.c.task == any_(tasks))


def claim_job_by_id(table: Table, *, due_only: bool = False) -> Executable:
    """Claim pending job ``:job_id`` (paused queue or not; due or not, unless `due_only`) for
    ``:worker_id`` under ``:token`` and ``:lease``, as `claim_jobs` marks a job: the testing helpers' way to
    run exactly one job (`sqla_queue.testing.run_job`, one pass of `drain`, inline mode).

    ``:attempt`` (NULL: the next one, as a claim counts it) and ``:scheduled_at`` (NULL: the
    job's own) let a test run the job as a later attempt or a given tick. ``FOR UPDATE SKIP
    LOCKED`` as in the claim: a job another claim holds is not waited for, and no row back means
    it is not pending (any more), or busy.
    """
    conditions = [table.c.id == bindparam("job_id", type_=BigInteger), status_is(table, JobStatus.PENDING)]
    if due_only:
        conditions.append(table.c.run_at <= func.clock_timestamp())
    target = (
        select(table.c.id)
        .where(*conditions)
        .with_for_update(skip_locked=True)
        .cte("target_job")
    )
    attempt = bindparam("attempt", type_=Integer)
    scheduled_at = bindparam("scheduled_at", type_=DateTime(timezone=True))
    return claimed_update(table, table.c.id == target.c.id,
                    attempts=func.coalesce(attempt, table.c.attempts + 1),
                    scheduled_at=func.coalesce(scheduled_at, table.c.scheduled_at))


def not_paused(table: Table):
    """The queue of ``:queue`` has no pause record (`claim_jobs`' pause check)."""
    return ~_paused(table, bindparam("queue"))


def _paused(table: Table, queue_name, *, outer=None):
    """The queue `queue_name` has a pause record; `outer`: the FROM element `queue_name` comes
    from, an enclosing query's (correlated to it, however deep the check sits)."""
    queues = queues_table(table)
    paused = exists().where(queues.c.queue_name == queue_name, queues.c.paused_at.is_not(None))
    return paused if outer is None else paused.correlate(outer)


def claimed_update(table: Table, which, **values) -> Executable:
    """The claim's UPDATE of the rows `which` picks, and what it returns: one shape for the
    claim and the claim by id, so a job claimed either way is the same `ClaimedJob`."""
    marked = {
        "status": JobStatus.RUNNING.value,
        "attempts": table.c.attempts + 1,
        "locked_at": func.clock_timestamp(),
        # The claiming worker's own lease: recovery reads this, not its own lease.
        "lease_expires_at": func.clock_timestamp() + bindparam("lease", type_=Interval),
        "locked_by": bindparam("worker_id"),
        "claim_token": bindparam("token"),
        "last_error": None,
        "last_traceback": None,
    }
    return (
        update(table)
        .where(which, live(table))
        .values({**marked, **values})
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
            table.c.priority,
            table.c.scheduled_at,
            table.c.snoozes,
            table.c.meta,
        )
    )


def complete_and_claim_jobs(table: Table, *, from_position: bool = False,
                            order: ClaimOrder = DEFAULT_ORDER) -> Executable:
    """The worker's round in one statement: complete the finished jobs (``:job_ids`` under
    their own ``:tokens``) and claim up to ``:limit`` more from the queues in ``:queues``, as
    `complete_jobs` and `claim_served_jobs` would.

    One statement is one round trip and, run on its own (autocommit), one commit: the whole
    database cost of a round, however many queues the worker serves. With `from_position` each
    queue's claim starts at its own position (see `claim_served_jobs`): a worker passes the
    position of its previous claim in a queue while it is working through a backlog, so each
    claim skips the dead index entries its predecessors left, and none (NULL) now and then to
    pick up anything that became due behind that position. Rows come back tagged by
    ``claimed``: false rows are completions (with ``duration``), true rows are claims (with the
    payload). The two halves touch disjoint rows (running vs pending), so sharing a snapshot
    changes nothing for either.
    """
    completed = complete_jobs(table).cte("completed_now")
    claimed = claim_served_jobs(table, from_position=from_position, order=order).cte("claimed_now")
    only_claims = ("payload", "claim_token", "idempotency_key", "locked_at", "run_at", "priority",
                   "scheduled_at", "snoozes", "meta")
    joined = settled(table, completed)
    return select(
        false().label("claimed"), *_identity(completed), completed.c.duration, completed.c.status,
        *(cast(null(), table.c[name].type).label(name) for name in only_claims), settle_again(joined),
    ).select_from(announced(joined, announce_finished(table, completed))).union_all(
        select(
            true().label("claimed"), *_identity(claimed), cast(null(), INTERVAL).label("duration"),
            cast(null(), Text).label("status"), *(claimed.c[name] for name in only_claims), NOTHING_TO_SETTLE,
        )
    )


def _identity(rows) -> tuple:
    return (rows.c.id, rows.c.queue_name, rows.c.task, rows.c.attempts, rows.c.max_attempts)
