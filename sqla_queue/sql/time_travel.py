"""Time travel for tests: pending jobs made due earlier in database time, no clock patched.

`sqla_queue.testing.drain` runs what is due "``advance`` from now" by moving those jobs'
``run_at`` back by ``advance`` before each claim; the claim itself stays the production one
(``run_at <= clock_timestamp()``).
"""

from __future__ import annotations

from sqlalchemy import Table, Text, any_, bindparam, func, update
from sqlalchemy.dialects.postgresql import ARRAY, INTERVAL
from sqlalchemy.sql import Executable

from ..types import JobStatus
from ._predicates import status_is


def advance_due_jobs(table: Table) -> Executable:
    """Pending jobs of ``:queues`` that become due within ``:advance`` from now (database
    clock) get ``run_at - :advance``: due now, in the same order among themselves.

    Jobs already due are left alone, so running the statement again before every claim moves
    each job at most once per ``advance`` of real time instead of pushing due jobs ever
    further back; jobs due later than the window keep their time. ``clock_timestamp()``, as
    in the claim: the window is measured when the statement runs, not when its transaction
    began. Served by the pending index (queue, priority, run_at).
    """
    advance = bindparam("advance", type_=INTERVAL)
    now = func.clock_timestamp()
    return (
        update(table)
        .where(
            table.c.queue_name == any_(bindparam("queues", type_=ARRAY(Text))),
            status_is(table, JobStatus.PENDING),
            table.c.run_at > now,
            table.c.run_at <= now + advance,
        )
        .values(run_at=table.c.run_at - advance)
        .returning(table.c.id)
    )
