"""The claim of a queue that is only fair (``fair=True`` and no cap or rate): jobs in turn
order, without the limits lock.

The turns are written by the enqueue (`sql.enqueue.fair_turn`, start-time fair queuing), so the
claim is an ordinary one over another index: the queue's due jobs in ``fair_tag`` order, and
within one turn in the Queue's `ClaimOrder`, read from ``pending_fair_idx`` and locked ``FOR
UPDATE SKIP LOCKED``. Claims of the queue run side by side like unlimited ones. A key's jobs
take their turns in the order they were enqueued; the claim order decides between the jobs of
one turn (each key's next job). When the due jobs with a turn do not fill the claim, due jobs
without one (written while the queue was not fair, or by other means than the enqueue) fill it
in claim order (docs/explanation/limits.md, "Fair turns").

A queue with a cap or a rate as well keeps the serialized claim of `sql.claim.limited`, whose
rotation is its own, under its lock.
"""

from __future__ import annotations

from sqlalchemy import Float, Table, case, false, func, literal, select, true, union_all
from sqlalchemy.sql import Executable

from ...tables import limits_table
from . import by_id_from, claimed_update
from .limited import claim_limit, due_conditions, limits_unchanged
from .order import DEFAULT_ORDER, ClaimOrder


def claim_fair_jobs(table: Table, *, order: ClaimOrder = DEFAULT_ORDER) -> Executable:
    """Claim up to ``:limit`` due jobs of fair queue ``:queue`` (module docs), for
    ``:worker_id`` under ``:token`` and ``:lease``, ``:tasks`` as in `claim_served_jobs`.

    Its parameters and rows are `claim_limited_jobs`': the limits it was built for
    (``:known_<column>``) must still be the queue's, or it takes nothing and says ``stale``;
    ``throttled`` is always false and ``start_after`` 0 (nothing here holds a job back)."""
    limits = limits_table(table)
    budget = case((limits_unchanged(limits), claim_limit()), else_=0)
    in_turn = (select(table.c.id)
               .where(*due_conditions(table), table.c.fair_tag.is_not(None))
               .order_by(table.c.fair_tag, *order.order_by(table)).limit(budget)
               .with_for_update(skip_locked=True).cte("in_turn"))
    left = func.greatest(budget - select(func.count()).select_from(in_turn).scalar_subquery(), 0)
    # A constant LIMIT and the shortfall as a condition checked once: with the shortfall as the
    # LIMIT, the planner (which cannot know it) sorts a scan of the whole table. It may lock up
    # to a batch of rows without a turn and claim fewer; the rest are free at the commit.
    without_turn = (select(table.c.id)
                    .where(left > 0, *due_conditions(table), table.c.fair_tag.is_(None))
                    .order_by(*order.order_by(table)).limit(claim_limit())
                    .with_for_update(skip_locked=True).cte("without_turn"))
    due = union_all(select(in_turn.c.id), select(without_turn.c.id).limit(left))
    claimed = (claimed_update(table, by_id_from(table, due))
               .returning(table.c.group_key, literal(0.0, Float).label("start_after")).cte("claimed"))
    summary = select(false().label("throttled"), (~limits_unchanged(limits)).label("stale")).cte("summary")
    return (select(*claimed.c, summary.c.throttled, summary.c.stale)
            .select_from(summary.outerjoin(claimed, true())))
