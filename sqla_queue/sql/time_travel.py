"""Time travel for tests: pending jobs made due earlier in database time, no clock patched.

`sqla_queue.testing.drain` runs what is or becomes due within ``advance`` by moving those jobs'
``run_at`` back by ``advance`` before each claim; the claim itself stays the production one
(``run_at <= clock_timestamp()``).
"""

from __future__ import annotations

from sqlalchemy import DateTime, Table, Text, any_, bindparam, update
from sqlalchemy.dialects.postgresql import ARRAY, INTERVAL
from sqlalchemy.sql import Executable

from ..types import JobStatus
from ._predicates import status_is


def advance_due_jobs(table: Table) -> Executable:
    """Pending jobs of ``:queues`` due by ``:now + :advance`` whose ``run_at`` is later than
    ``:since`` get ``run_at - :advance``.

    Every job is moved once, by the same amount, when it first falls within the window, so the
    claim order among all of them is the order of their original times. The caller passes the
    ``:now`` of its previous move as ``:since`` (the start of time the first time): a job moved
    then sits at or before that ``:now`` and is not moved again, while a job enqueued,
    retried or snoozed since has a later ``run_at`` and is. Jobs due later than the window keep
    their time until it reaches them. For test databases: no index was chosen for it.
    """
    advance = bindparam("advance", type_=INTERVAL)
    return (
        update(table)
        .where(
            table.c.queue_name == any_(bindparam("queues", type_=ARRAY(Text))),
            status_is(table, JobStatus.PENDING),
            table.c.run_at > bindparam("since", type_=DateTime(timezone=True)),
            table.c.run_at <= bindparam("now", type_=DateTime(timezone=True)) + advance,
        )
        .values(run_at=table.c.run_at - advance)
        .returning(table.c.id)
    )
