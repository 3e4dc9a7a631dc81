"""Workflows: how a job that waits for others is linked to them, and released when they finish.

A job enqueued with dependencies that have not finished is ``waiting``, with ``waiting_on``
counting them; each dependency's ``dependents`` counts the jobs that wait for it, and the
dependencies table (`tables.dependencies_table`) holds the edges. No claim reads a waiting job.

Readiness is decided by the statement that finishes a dependency, whichever it is (the worker's
round, `Queue.complete`, ``ctx.transaction()``, a failure, a cancel, recovery): each of them
joins `settled` to the rows it finished. It reads the dependencies table only for finished rows
whose ``dependents`` is above zero (an uncorrelated gate, so for every other completion the
reads below it never run), subtracts from each dependent's ``waiting_on`` under that row's lock
(``UPDATE ... SET waiting_on = waiting_on - n``: two dependencies finishing at once in two
transactions serialize on the dependent's row, and the second sees the first's count), and
turns it pending at zero. A dependency that failed or was cancelled cancels its dependents,
and theirs (a recursive walk of the edges), except along an edge marked ``run_anyway``, which
counts the dependency as done instead.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Integer,
    Table,
    any_,
    bindparam,
    case,
    cast,
    exists,
    false,
    func,
    literal,
    null,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.sql import Executable

from ..tables import dependencies_table
from ..types import ACTIVE_STATUSES, FINISHED_STATUSES, JobStatus
from ._predicates import status_is, status_is_one_of
from .notify import announce_finished, announced, channel_name

DEPENDENCY_FAILED = "a dependency failed or was cancelled"
"""``last_error`` of a job cancelled because a job it depends on failed or was cancelled."""


def settled(table: Table, finished: Any) -> Any:
    """`finished` (a CTE of rows a statement just changed, with ``id``, ``status`` and
    ``dependents``) outer-joined to the CTEs that settle their dependents, so that a statement
    selecting from it runs them (see the module's docs). Rows that did not reach a finished
    state (a retry back to pending) are no one's finished dependency."""
    deps = dependencies_table(table)
    waiting = table.alias(f"{finished.name}_waiting")
    parents = (
        select(finished.c.id, finished.c.dependents,
               (finished.c.status != _literal(JobStatus.COMPLETED)).label("failed"))
        .where(finished.c.dependents > 0, finished.c.status.in_([_literal(s) for s in FINISHED_STATUSES]))
        .cte(f"{finished.name}_parents")
    )
    gate = exists().select_from(parents)
    doomed = (
        select(deps.c.job_id)
        .join(parents, parents.c.id == deps.c.depends_on)
        .join(waiting, waiting.c.id == deps.c.job_id)
        .where(exists().where(parents.c.failed), parents.c.failed, ~deps.c.run_anyway, _is_waiting(waiting))
        .cte(f"{finished.name}_doomed", recursive=True)
    )
    deeper = deps.alias(f"{finished.name}_deeper")
    below = table.alias(f"{finished.name}_below")
    doomed = doomed.union(
        select(deeper.c.job_id)
        .join(doomed, doomed.c.job_id == deeper.c.depends_on)
        .join(below, below.c.id == deeper.c.job_id)
        .where(~deeper.c.run_anyway, _is_waiting(below))
    )
    ended = func.array(select(parents.c.id).union_all(select(doomed.c.job_id)).scalar_subquery())
    counts = (
        select(deps.c.job_id, func.count().label("done"))
        .where(gate, deps.c.depends_on == any_(ended))
        .group_by(deps.c.job_id)
        .cte(f"{finished.name}_counts")
    )
    released = _released(table, counts, doomed, gate, f"{finished.name}_released")
    woken = (
        select(func.count(func.pg_notify(literal(channel_name(table)), released.c.queue_name)).label("woken"))
        .where(released.c.status == _literal(JobStatus.PENDING))
        .cte(f"{finished.name}_woken")
    )
    cancelled = announce_finished(table, released, only=released.c.status == _literal(JobStatus.CANCELLED))
    return announced(finished, cancelled).outerjoin(woken, true()).outerjoin(_missed(deps, parents), true())


NOTHING_TO_SETTLE = cast(null(), ARRAY(BigInteger)).label("settle_again")
"""`settle_again` for a branch of a UNION that finished nothing (a replay, a claim)."""


def settle_again(joined: Any) -> Any:
    """The ``settle_again`` column of a `settled` join: the ids of the finished rows whose
    ``dependents`` count more edges than the statement saw (NULL: none). An enqueue that
    committed after the statement's snapshot was taken, while the statement waited for its
    lock on the dependency, added an edge the statement cannot see; the caller settles those
    rows' dependents again in a fresh statement (`lock_waiting_dependents`, then
    `recount_waiting`)."""
    return joined.right.c.settle_again


def _missed(deps: Table, parents: Any) -> Any:
    """One row: `settle_again`'s ids. Counted per parent (by the edges' primary key) only for
    rows with dependents, so a completion without any never reads the dependencies table.
    MATERIALIZED: inlined into the outer join, it would be computed again for every row."""
    seen = select(func.count()).where(deps.c.depends_on == parents.c.id).scalar_subquery()
    return (select(func.array_agg(parents.c.id).label("settle_again"))
            .where(parents.c.dependents > seen).cte(f"{parents.name}_missed").prefix_with("MATERIALIZED"))


def _literal(status: JobStatus) -> Any:
    return literal(status.value, literal_execute=True)


def _is_waiting(table: Any) -> Any:
    """``(status = 'waiting') IS TRUE``: the same test, but the planner cannot match the
    partial active-key index with it, so the row is found by primary key, never by reading
    every active job through that index."""
    return status_is(table, JobStatus.WAITING).is_(true())


def _released(table: Table, counts: Any, doomed: Any, gate: Any, name: str) -> Any:
    """The waiting dependents of `counts` (``job_id``, ``done``): cancelled if in `doomed`,
    pending once nothing is left to wait for, else waiting for fewer. ``waiting_on -
    done`` is computed on the row as locked, so concurrent settles add up. `gate` keeps the
    whole update from running when no finished row has dependents."""
    is_doomed = exists().where(doomed.c.job_id == table.c.id)
    left = table.c.waiting_on - counts.c.done
    now = func.clock_timestamp()
    # ``id = ANY(...)`` as well as the join: a path by primary key the planner takes even when
    # the table's statistics predate a large enqueue (it would hash the whole table instead).
    by_key = table.c.id == any_(func.array(select(counts.c.job_id).scalar_subquery()))
    return (
        update(table)
        .where(gate, table.c.id == counts.c.job_id, by_key, _is_waiting(table))
        .values(
            waiting_on=func.greatest(left, 0),
            status=case((is_doomed, _literal(JobStatus.CANCELLED)), (left <= 0, _literal(JobStatus.PENDING)),
                        else_=_literal(JobStatus.WAITING)),
            cancelled_at=case((is_doomed, now), else_=None),
            last_error=case((is_doomed, DEPENDENCY_FAILED), else_=table.c.last_error),
            # Said explicitly: SQLAlchemy turns an execution parameter named like a column into
            # a SET of every UPDATE in the statement, and a completion passes ``:result``.
            result=table.c.result,
        )
        .returning(table.c.id, table.c.status, table.c.queue_name, table.c.watched)
        .cte(name)
    )


# -- settling again ---------------------------------------------------------------------------


def lock_waiting_dependents(table: Table) -> Executable:
    """The waiting jobs that depend on ``:parents``, row-locked, read in a statement of their
    own: the first half of settling them again (`settle_again`). The count that follows
    (`recount_waiting`) runs after the locks are held, in a fresh snapshot, so no other
    transaction has an uncommitted decrement of these rows that it would miss."""
    deps = dependencies_table(table)
    parents = bindparam("parents", type_=ARRAY(BigInteger))
    return (
        select(table.c.id)
        .where(table.c.id.in_(select(deps.c.job_id).where(deps.c.depends_on == any_(parents))), _is_waiting(table))
        .order_by(table.c.id)
        .with_for_update(key_share=True)
    )


def recount_waiting(table: Table, *, backstop: bool = False) -> Executable:
    """Waiting jobs' ``waiting_on`` recounted from their dependencies' statuses: cancelled if
    one failed or was cancelled along an edge without ``run_anyway``, pending if none is left
    active, else waiting for the ones left; their dependents settled as by any finishing
    statement. A recount is idempotent, unlike the finishing statements' decrements.

    Without `backstop`: jobs ``:job_ids``, which the caller locked in an earlier statement of
    its transaction (`lock_waiting_dependents`). With it: the recovery pass's check, up to
    ``:limit`` waiting jobs found through the dependencies table (empty without workflows),
    acting only on those with nothing left to wait for: unlocked, a count read from a snapshot
    could miss a decrement committed meanwhile, but "every dependency finished" stays true."""
    deps = dependencies_table(table)
    if backstop:
        candidates = (select(deps.c.job_id.label("id")).distinct()
                      .join(table, table.c.id == deps.c.job_id).where(_is_waiting(table))
                      .limit(bindparam("limit")).subquery("candidate"))
    else:
        candidates = func.unnest(bindparam("job_ids", type_=ARRAY(BigInteger))).table_valued("id").render_derived(
            "candidate")
    counted = select(candidates.c.id, _left(table, deps, candidates.c.id).label("left"),
                     _doomed(table, deps, candidates.c.id).label("doomed")).cte("recount")
    changes = (counted.c.doomed | (counted.c.left == 0)) if backstop else true()
    now = func.clock_timestamp()
    changed = (
        update(table)
        .where(table.c.id == counted.c.id, _is_waiting(table), changes)
        .values(
            waiting_on=counted.c.left,
            status=case((counted.c.doomed, _literal(JobStatus.CANCELLED)), (counted.c.left == 0, _literal(JobStatus.PENDING)),
                        else_=_literal(JobStatus.WAITING)),
            cancelled_at=case((counted.c.doomed, now), else_=None),
            last_error=case((counted.c.doomed, DEPENDENCY_FAILED), else_=table.c.last_error),
        )
        .returning(table.c.id, table.c.status, table.c.queue_name, table.c.watched, table.c.dependents)
        .cte("recounted")
    )
    woken = (
        select(func.count(func.pg_notify(literal(channel_name(table)), changed.c.queue_name)).label("woken"))
        .where(changed.c.status == _literal(JobStatus.PENDING))
        .cte("recount_woken")
    )
    joined = settled(table, changed)
    ended = announce_finished(table, changed, only=changed.c.status == _literal(JobStatus.CANCELLED))
    return (select(changed.c.id, changed.c.status, settle_again(joined))
            .select_from(announced(joined, ended).outerjoin(woken, true())))


def _left(table: Table, deps: Table, job_id: Any) -> Any:
    """How many of `job_id`'s dependencies are still active (a pruned one is finished)."""
    dependency = table.alias("dependency")
    return (select(func.count()).select_from(deps.join(dependency, dependency.c.id == deps.c.depends_on))
            .where(deps.c.job_id == job_id, status_is(dependency, *ACTIVE_STATUSES)).scalar_subquery())


def _doomed(table: Table, deps: Table, job_id: Any) -> Any:
    """Whether one of `job_id`'s dependencies failed or was cancelled along an edge without
    ``run_anyway``."""
    dependency = table.alias("failed_dependency")
    failed = [s for s in FINISHED_STATUSES if s is not JobStatus.COMPLETED]
    return exists().select_from(deps.join(dependency, dependency.c.id == deps.c.depends_on)).where(
        deps.c.job_id == job_id, ~deps.c.run_anyway, status_is(dependency, *failed))


# -- retry ------------------------------------------------------------------------------------


def rearmed(table: Table, retried: Any) -> Any:
    """A CTE putting back to ``waiting`` the jobs that `retried` (failed jobs made pending
    again, a CTE with ``id``, ``status`` and ``dependents``) had cancelled: the dependents
    cancelled with `DEPENDENCY_FAILED` along edges without ``run_anyway``, and theirs. A job that
    another failed or cancelled dependency would cancel again stays cancelled, and so do the
    ones below it. ``waiting_on`` counts the dependencies still active, the revived ones
    included. A data-modifying CTE, so it runs whether the statement reads it or not; only
    retried rows with dependents read the dependencies table."""
    deps = dependencies_table(table)
    roots = select(retried.c.id).where(retried.c.dependents > 0,
                                       retried.c.status == _literal(JobStatus.PENDING)).cte("rearm_roots")
    reach = _descendants(table, deps, roots.c.id, _was_doomed, "rearm_reach")
    revived = func.array(select(roots.c.id).union_all(select(reach.c.job_id)).scalar_subquery())
    other = table.alias("other_dependency")
    blocked_edge = deps.alias("blocked_edge")
    cancels_again = (
        select(blocked_edge.c.job_id)
        .join(reach, reach.c.job_id == blocked_edge.c.job_id)
        .join(other, other.c.id == blocked_edge.c.depends_on)
        .where(~blocked_edge.c.run_anyway, ~(other.c.id == any_(revived)),
               status_is(other, *[s for s in FINISHED_STATUSES if s is not JobStatus.COMPLETED]))
    )
    blocked = _descendants(table, deps, cancels_again.subquery("cancels_again").c.job_id, _was_doomed,
                           "rearm_blocked", include_roots=True)
    dependency = table.alias("rearm_dependency")
    left = (select(func.count()).select_from(deps.join(dependency, dependency.c.id == deps.c.depends_on))
            .where(deps.c.job_id == table.c.id,
                   status_is(dependency, *ACTIVE_STATUSES) | (dependency.c.id == any_(revived)))
            .scalar_subquery())
    return (
        update(table)
        .where(table.c.id.in_(select(reach.c.job_id)), ~table.c.id.in_(select(blocked.c.job_id)), _was_doomed(table))
        .values(status=_literal(JobStatus.WAITING), waiting_on=left, cancelled_at=None, last_error=None,
                archived=false())
        .returning(table.c.id)
        .cte("rearmed")
    )


def _was_doomed(table: Any) -> Any:
    """Cancelled because a dependency failed or was cancelled (`DEPENDENCY_FAILED`)."""
    return status_is(table, JobStatus.CANCELLED).is_(true()) & (table.c.last_error == DEPENDENCY_FAILED)


def _descendants(table: Table, deps: Table, start: Any, which: Any, name: str, *, include_roots: bool = False) -> Any:
    """A recursive CTE (``job_id``) of the jobs below the ids `start` along edges without
    ``run_anyway`` whose rows satisfy `which` (`start` itself too with `include_roots`)."""
    first = table.alias(f"{name}_first")
    edge = deps.alias(f"{name}_edge")
    if include_roots:
        base = select(start.label("job_id"))
    else:
        base = (select(edge.c.job_id).join(first, first.c.id == edge.c.job_id)
                .where(edge.c.depends_on == start, ~edge.c.run_anyway, which(first)))
    found = base.cte(name, recursive=True)
    deeper = deps.alias(f"{name}_deeper")
    below = table.alias(f"{name}_below")
    return found.union(
        select(deeper.c.job_id)
        .join(found, found.c.job_id == deeper.c.depends_on)
        .join(below, below.c.id == deeper.c.job_id)
        .where(~deeper.c.run_anyway, which(below))
    )


# -- enqueue ----------------------------------------------------------------------------------


def lock_dependencies(table: Table) -> Executable:
    """The jobs ``:job_ids`` a new job is to depend on, row-locked, with their status.

    The lock (the one an UPDATE takes) makes the status read final: a statement finishing one
    of them either committed before (its status is final here, and the new job counts it as
    finished) or waits for this transaction, and then sees its ``dependents`` and edges."""
    return (
        select(table.c.id, table.c.status)
        .where(table.c.id == any_(bindparam("job_ids", type_=ARRAY(BigInteger))))
        .order_by(table.c.id)
        .with_for_update(key_share=True)
    )


def link_dependencies(table: Table) -> Executable:
    """Insert the edges (``:edge_jobs`` depends on ``:edge_parents``, ``:edge_run`` whether it
    runs when that one fails) and add ``:counts`` to the ``dependents`` of ``:parents`` (jobs
    that existed before this enqueue; new ones were inserted with theirs)."""
    deps = dependencies_table(table)
    edges = func.unnest(
        bindparam("edge_jobs", type_=ARRAY(BigInteger)), bindparam("edge_parents", type_=ARRAY(BigInteger)),
        bindparam("edge_run", type_=ARRAY(Boolean)),
    ).table_valued("job_id", "depends_on", "run_anyway").render_derived("edge")
    linked = (
        insert(deps)
        .from_select(["job_id", "depends_on", "run_anyway"],
                     select(edges.c.job_id, edges.c.depends_on, edges.c.run_anyway))
        .returning(deps.c.job_id)
        .cte("linked")
    )
    bumps = func.unnest(
        bindparam("parents", type_=ARRAY(BigInteger)), bindparam("counts", type_=ARRAY(Integer)),
    ).table_valued("id", "n").render_derived("bump")
    bumped = (
        update(table)
        .where(table.c.id == bumps.c.id)
        .values(dependents=table.c.dependents + bumps.c.n)
        .returning(table.c.id)
        .cte("bumped")
    )
    return select(
        select(func.count()).select_from(linked).scalar_subquery().label("edges"),
        select(func.count()).select_from(bumped).scalar_subquery().label("bumped"),
    )


# -- reads ------------------------------------------------------------------------------------


def dependency_results(table: Table) -> Executable:
    """``id, result`` of each job ``:job_id`` depends on (a pruned one has no row): what its
    handler reads as ``ctx.dependency_results``. By the edges' ``job_id`` index, then the
    primary key."""
    deps = dependencies_table(table)
    return (
        select(table.c.id, table.c.result)
        .join(deps, deps.c.depends_on == table.c.id)
        .where(deps.c.job_id == bindparam("job_id"))
        .order_by(table.c.id)
    )


def dependency_counts(table: Table) -> Executable:
    """How many of the jobs ``:job_id`` depends on are in each status (NULL: pruned), with
    ``:job_id``'s own status on every row: a batch's progress (`Queue.batch_status`,
    ``ctx.batch``). By the edges' ``job_id`` index, then each job's primary key."""
    deps = dependencies_table(table)
    callback = table.alias("callback")
    own = select(callback.c.status).where(callback.c.id == bindparam("job_id")).scalar_subquery()
    return (
        select(table.c.status, func.count().label("n"), own.label("callback"))
        .select_from(deps.outerjoin(table, table.c.id == deps.c.depends_on))
        .where(deps.c.job_id == bindparam("job_id"))
        .group_by(table.c.status)
    )


def dependencies_of(table: Table) -> Executable:
    """The jobs ``:job_id`` depends on: id, task, status (NULL once pruned), ``run_anyway``."""
    return _linked(table, upstream=True)


def dependents_of(table: Table) -> Executable:
    """The jobs that depend on ``:job_id``: id, task, status (NULL once pruned), ``run_anyway``."""
    return _linked(table, upstream=False)


def _linked(table: Table, *, upstream: bool) -> Executable:
    """The jobs at the other end of ``:job_id``'s edges, one direction: the same read either
    way, `upstream` says which column of the edge is ``:job_id``."""
    deps = dependencies_table(table)
    mine, other = (deps.c.job_id, deps.c.depends_on) if upstream else (deps.c.depends_on, deps.c.job_id)
    return (
        select(other.label("id"), table.c.task, table.c.status, deps.c.run_anyway)
        .select_from(deps.outerjoin(table, table.c.id == other))
        .where(mine == bindparam("job_id"))
        .order_by(other)
    )


def has_live_dependents(table: Table) -> Any:
    """True for a row that an active job (waiting, pending or running) depends on: pruning
    keeps it. Only rows with ``dependents > 0`` look at the edges (an OR, so the planner keeps
    it a per-row check instead of an anti-join over the table)."""
    deps = dependencies_table(table)
    live = table.alias("live_dependent")
    return (table.c.dependents > 0) & exists().where(
        deps.c.depends_on == table.c.id, live.c.id == deps.c.job_id, status_is_one_of(live, *ACTIVE_STATUSES))
