"""The claim's order, as a strategy: `ClaimOrder`.

Which due jobs a claim takes first is one object's decision, chosen per Queue
(``Queue(claim_order=...)``): it owns the ORDER BY of the claim's CTE, the pending index that
serves it (which `doctor` expects the claim's plan to read), and the keyset position a worker
resumes from while it works through a backlog (or none). `PriorityOrder` is the default and
today's order; a fair or capped claim is another implementation of the same protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from sqlalchemy import BigInteger, ColumnElement, DateTime, SmallInteger, Table, bindparam, tuple_

from ...errors import InvalidInputError
from ...types import ClaimedJob


@runtime_checkable
class ClaimOrder(Protocol):
    """How a claim orders due jobs. Implementations are immutable and hashable (statements are
    built once per table and order)."""

    name: str

    def order_by(self, table: Table) -> list[ColumnElement[Any]]:
        """The claim's ORDER BY over `table`'s columns."""

    def index_name(self, table: Table) -> str:
        """The partial index on pending jobs whose key order is `order_by` (the claim reads it
        in order and stops after LIMIT entries)."""

    def resumes(self) -> bool:
        """Whether a claim can start at a position (`position_conditions`), skipping the dead
        index entries earlier claims left at the head of the order."""

    def position_conditions(self, table: Table) -> list[ColumnElement[bool]]:
        """Conditions that start the claim at the position in ``:from_*`` parameters."""

    def position(self, jobs: Sequence[ClaimedJob]) -> tuple[Any, ...] | None:
        """Where a claim that returned `jobs` got to in this order; None: start over."""

    def position_params(self, position: Any) -> dict[str, Any]:
        """`position` as the ``:from_*`` parameters (an `InvalidInputError` if malformed)."""

    # Optional, over the same ``:from_*`` parameters: ``before_position_conditions(table)`` and
    # ``after_position_conditions(table)`` (each -> list[ColumnElement[bool]]), the due jobs that
    # come before and after every job `position_conditions` can reach, in claim order. A claim
    # from a position reads them before and after its own range, so it misses only what became
    # due behind the position in that range, and a claim that comes up short has seen every
    # other due job: the worker keeps its position instead of starting over at the head of the
    # index (`sql.claim.claim_served_jobs`).


@dataclass(frozen=True)
class PriorityOrder:
    """Highest ``priority`` first, then by due time (``run_at``), then ``id``: the key order of
    the ``<table>_pending_claim_idx`` index. A position stays within one priority (a row
    comparison cannot mix the index's descending and ascending keys): when that priority runs
    out the worker starts again from the head, which is also how it finds higher-priority jobs
    that arrived meanwhile."""

    name: str = "priority"

    def order_by(self, table: Table) -> list[ColumnElement[Any]]:
        return [table.c.priority.desc(), table.c.run_at, table.c.id]

    def index_name(self, table: Table) -> str:
        return f"{table.name}_pending_claim_idx"

    def resumes(self) -> bool:
        return True

    def position_conditions(self, table: Table) -> list[ColumnElement[bool]]:
        start = (bindparam("from_run_at", type_=DateTime(timezone=True)), bindparam("from_id", type_=BigInteger))
        return [table.c.priority == bindparam("from_priority", type_=SmallInteger),
                tuple_(table.c.run_at, table.c.id) >= tuple_(*start)]

    def before_position_conditions(self, table: Table) -> list[ColumnElement[bool]]:
        return [table.c.priority > bindparam("from_priority", type_=SmallInteger)]

    def after_position_conditions(self, table: Table) -> list[ColumnElement[bool]]:
        return [table.c.priority < bindparam("from_priority", type_=SmallInteger)]

    def position(self, jobs: Sequence[ClaimedJob]) -> tuple[int, datetime, int] | None:
        """The earliest claimed job within the lowest priority the claim reached, as
        ``(priority, run_at, id)``: the claim read the pending index in order, so every due job
        ranked above that priority was claimed or skipped (locked) by some claim, and so was
        every job of that priority before the earliest one claimed."""
        lowest = min((job.priority for job in jobs if job.run_at is not None), default=None)
        if lowest is None:
            return None
        return min((lowest, job.run_at, job.id) for job in jobs if job.priority == lowest and job.run_at is not None)

    def position_params(self, position: Any) -> dict[str, Any]:
        if (not isinstance(position, tuple) or len(position) != 3
                or isinstance(position[0], bool) or not isinstance(position[0], int)
                or not isinstance(position[1], datetime) or position[1].tzinfo is None
                or isinstance(position[2], bool) or not isinstance(position[2], int)):
            raise InvalidInputError(
                "from_position must be None or a (priority, run_at, id) tuple of an integer, an aware "
                "datetime and an integer"
            )
        return {"from_priority": position[0], "from_run_at": position[1], "from_id": position[2]}


DEFAULT_ORDER = PriorityOrder()
"""The claim order of a Queue that names none."""
