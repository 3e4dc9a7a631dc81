"""Enqueueing jobs with dependencies (``depends_on=``), and what their handlers read of them.

A call whose jobs name dependencies takes this path instead of the plain INSERT, in one
transaction (the caller's or ours), three statements: the existing dependencies are locked
and read (`sql.dependencies.lock_dependencies`: the status seen under the lock is final, so a
dependency that completed before counts as done, and one that finishes later sees the new
edges), the jobs are inserted waiting or pending with their counts, and the edges are inserted
with the dependencies' ``dependents`` raised. Everything is checked before the first write:
an unknown id, a dependency that already failed (unless ``on_dependency_failure="run"``), an
idempotency key in the call: each raises and writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from ..db.engine import database_errors
from ..db.executor import ARRAY_PARAMS, Statements
from ..errors import InvalidInputError, JobStateError
from ..types import FINISHED_STATUSES, JobStatus
from ..workflow import BatchStatus, Earlier, Reference, batch_status

_FAILED = frozenset(status.value for status in FINISHED_STATUSES) - {JobStatus.COMPLETED.value}


@dataclass(frozen=True)
class Dependencies:
    """One job's dependencies as given: the references and whether it runs when one fails."""

    refs: tuple[Reference, ...]
    run_anyway: bool


def refuse_keys(keys: Sequence[str | None]) -> None:
    """A call with dependencies takes no idempotency keys: a key that resolves to another,
    already active job would leave its place in the graph to a job enqueued without it."""
    keyed = [key for key in keys if key is not None]
    if keyed:
        raise InvalidInputError(
            f"idempotency keys cannot be combined with depends_on in one call (got key {keyed[0]!r}); "
            "enqueue the keyed jobs in a call of their own")


def write_graph(conn: Connection, statements: Statements, columns: tuple[list[Any], ...],
                deps: dict[int, Dependencies], *, channel: str, notify: bool) -> list[int]:
    """Insert the jobs given as `columns` (`sql.enqueue.INPUT_COLUMNS` order) whose dependencies
    are `deps` (by index) on `conn`, in its transaction; their ids in input order."""
    existing = sorted({ref for d in deps.values() for ref in d.refs if not isinstance(ref, Earlier)})
    statuses = _locked_statuses(conn, statements, existing) if existing else {}
    count = len(columns[0])
    states, waiting_on, dependents = _plan(count, deps, statuses)
    params: dict[str, Any] = dict(zip(ARRAY_PARAMS, columns))
    params.update(statuses=states, waiting_ons=waiting_on, dependent_counts=dependents, channel=channel,
                  notify=notify)
    with database_errors():
        ids = sorted(row[0] for row in conn.execute(statements.insert_graph, params).all())
        conn.execute(statements.link_dependencies, _links(ids, deps)).all()
    return ids


def _locked_statuses(conn: Connection, statements: Statements, existing: list[int]) -> dict[int, str]:
    with database_errors():
        rows = conn.execute(statements.lock_dependencies, {"job_ids": existing}).all()
    found = {row.id: row.status for row in rows}
    missing = [job_id for job_id in existing if job_id not in found]
    if missing:
        raise InvalidInputError(f"depends_on names job(s) that do not exist: {', '.join(map(str, missing[:10]))}")
    return found


def _plan(count: int, deps: dict[int, Dependencies],
          statuses: dict[int, str]) -> tuple[list[str], list[int], list[int]]:
    """Each job's first status, ``waiting_on`` and ``dependents``: a dependency that completed
    counts as done, and so does one that failed or was cancelled for a job that runs anyway."""
    states, waiting_on, dependents = [JobStatus.PENDING.value] * count, [0] * count, [0] * count
    for index in range(count):
        given = deps.get(index)
        if given is None:
            continue
        left = 0
        for ref in given.refs:
            if isinstance(ref, Earlier):
                dependents[ref.index] += 1
                left += 1
            elif statuses[ref] in _FAILED and not given.run_anyway:
                where = f"jobs[{index}]: " if count > 1 else ""
                raise JobStateError(
                    f"{where}depends on job {ref}, which is {statuses[ref]}: it would never run; "
                    "pass on_dependency_failure='run' to run it anyway")
            elif statuses[ref] not in _FAILED and statuses[ref] != JobStatus.COMPLETED.value:
                left += 1
        if left:
            states[index], waiting_on[index] = JobStatus.WAITING.value, left
    return states, waiting_on, dependents


def _links(ids: list[int], deps: dict[int, Dependencies]) -> dict[str, list[Any]]:
    """`link_dependencies`' parameters: the edges, and how many new dependents each existing
    job gained."""
    edges: tuple[list[Any], list[Any], list[Any]] = ([], [], [])
    gained: dict[int, int] = {}
    for index, given in sorted(deps.items()):
        for ref in given.refs:
            parent = ids[ref.index] if isinstance(ref, Earlier) else ref
            if not isinstance(ref, Earlier):
                gained[ref] = gained.get(ref, 0) + 1
            for column, value in zip(edges, (ids[index], parent, given.run_anyway)):
                column.append(value)
    return {"edge_jobs": edges[0], "edge_parents": edges[1], "edge_run": edges[2],
            "parents": sorted(gained), "counts": [gained[p] for p in sorted(gained)]}


def settle_again(conn: Connection, statements: Statements, rows: Sequence[Any]) -> None:
    """Settle again, on `conn`, the dependents of the rows a finishing statement flagged
    (``settle_again``, `sql.dependencies.settle_again`): an enqueue committed while that
    statement waited for its lock added edges it could not see. Two statements, so that the
    recount reads a snapshot taken once the dependents' rows are locked. `conn` must be in a
    transaction (the locks are held to its end)."""
    parents = sorted({job_id for row in rows for job_id in (row.settle_again or ())})
    if not parents:
        return
    with database_errors():
        locked = [row.id for row in conn.execute(statements.lock_waiting_dependents, {"parents": parents})]
        if locked:
            conn.execute(statements.recount_waiting, {"job_ids": locked}).all()


def dependency_results(conn: Connection, statements: Statements, job_id: int) -> dict[int, Any]:
    """``ctx.dependency_results``: each dependency's id and stored result (None when it
    returned nothing, failed or was cancelled and the job runs anyway)."""
    with database_errors():
        return {row.id: row.result for row in conn.execute(statements.dependency_results, {"job_id": job_id})}


def dependency_graph(core: Any, job_id: int) -> dict[str, list[dict[str, Any]]]:
    """`Queue.dependencies`: the jobs `job_id` depends on and the jobs that depend on it, read
    through `core` (a `Core`)."""
    statements = core.statements
    with core.executor.transaction() as conn, database_errors():
        return {key: [dict(row._mapping) for row in conn.execute(statement, {"job_id": job_id})]
                for key, statement in (("depends_on", statements.dependencies_of),
                                       ("dependents", statements.dependents_of))}


def batch_of(conn: Connection, statements: Statements, job_id: int) -> BatchStatus | None:
    """``ctx.batch`` and `Queue.batch_status`: the progress of the jobs `job_id` depends on
    (a batch's callback depends on every job of its batch); None when it depends on none."""
    with database_errors():
        rows = conn.execute(statements.dependency_counts, {"job_id": job_id}).all()
    if not rows:
        return None
    return batch_status(job_id, ((row.status, row.n) for row in rows), rows[0].callback)


def queue_batch_status(core: Any, batch_id: int) -> BatchStatus:
    """`Queue.batch_status`, read through `core` (a `Core`)."""
    with core.executor.transaction() as conn:
        status = batch_of(conn, core.statements, batch_id)
    if status is None:
        raise InvalidInputError(f"batch_id {batch_id} is not a batch: no job has that id, or it depends on no job")
    return status
