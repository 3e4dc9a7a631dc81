"""Retention: delete finished jobs in bounded batches, oldest first.

A prune can never fight a claim or take an unfinished job: it selects its batch with
``FOR UPDATE SKIP LOCKED`` and a literal finished status, re-checked under the row lock.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Interval, Table, any_, bindparam, cast, func, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql import Executable

from ..states import JobStatus, State, state_of
from ..tables import dependencies_table
from ._predicates import live, status_is
from .dependencies import has_live_dependents


def prune_finished(table: Table, state: State | JobStatus, *, live_only: bool = False) -> Executable:
    """Delete up to ``:limit`` jobs in terminal `state` that entered it more than ``:age`` ago;
    returns how many. `live_only`: only rows not archived yet, for a partitioned table, whose
    archived jobs retention drops a day at a time (`sqla_queue.ops.storage`).

    The status is inlined so the oldest rows come off the state's finished-at partial index in
    order. Pending and running rows are not in that index and the status is re-checked under
    the row lock, so they can never be deleted. SKIP LOCKED leaves a row another transaction
    holds for the next batch. A job an active job depends on is kept (its result is that job's
    ``ctx.dependency_results``): only rows with ``dependents > 0`` look at their edges, so the
    walk stays on the finished-at index. A pruned job's own edges go with it.
    """
    state = state if isinstance(state, State) else state_of(state)
    finished_at = table.c[state.finished_at]
    doomed = (
        select(table.c.id)
        .where(status_is(table, state.status), finished_at < func.now() - bindparam("age", type_=Interval),
               ~has_live_dependents(table), *([live(table)] if live_only else []))
        .order_by(finished_at)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
        .cte("doomed")
    )
    # ``id = ANY(array)``, not a join to the CTE: with the batch size a parameter the planner
    # cannot size the join and may hash it against a scan of the whole table; an array of ids
    # is always probed through the primary key.
    ids = cast(select(func.array_agg(doomed.c.id)).scalar_subquery(), ARRAY(BigInteger))
    gone = table.delete().where(table.c.id == any_(ids)).returning(table.c.id).cte("gone")
    deps = dependencies_table(table)
    edges = deps.delete().where(deps.c.job_id == any_(ids)).returning(deps.c.job_id).cte("gone_edges")
    return select(func.count().label("deleted")).select_from(gone).add_cte(edges)
