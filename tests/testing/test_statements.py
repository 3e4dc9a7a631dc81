"""The time-travel statement behind `drain`'s ``advance``, run against real PostgreSQL (the
compiled shapes of the testing helpers' statements are in tests/sql/test_queue_statements.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sqlalchemy import select

import sqla_queue as sq
from sqla_queue.sql.stats import database_now
from sqla_queue.sql.time_travel import advance_due_jobs

TABLE = sq.Job.__table__


def test_time_travel_against_postgresql(queue, own_engine):
    """Every job within the window moves once and by the same amount: the order of due times
    is kept; a job scheduled after the move moves at the next one."""
    due = queue.enqueue("resize", {"n": 0})
    soon = [queue.enqueue("resize", {"n": n}, delay=timedelta(minutes=n)) for n in (10, 20)]
    late = queue.enqueue("resize", {"n": 3}, delay=timedelta(hours=2))
    other_queue = queue.enqueue("resize", {"n": 4}, delay=timedelta(minutes=5), queue="elsewhere")
    before = _run_at(own_engine)
    hour = timedelta(hours=1)

    first = _advance(own_engine, since=datetime(1, 1, 1, tzinfo=timezone.utc), advance=hour)
    assert sorted(first.moved) == [due, *soon]
    after = _run_at(own_engine)
    assert {i: after[i] - before[i] for i in [due, *soon]} == dict.fromkeys([due, *soon], -hour)
    assert after[late] == before[late] and after[other_queue] == before[other_queue]

    retried = queue.enqueue("resize", {"n": 5}, delay=timedelta(minutes=1))  # after the first move
    second = _advance(own_engine, since=first.now, advance=hour)
    assert second.moved == [retried]  # the moved ones are not moved twice


class _Moved:
    def __init__(self, moved, now):
        self.moved, self.now = moved, now


def _advance(engine, *, since, advance):
    with engine.begin() as conn:
        now = conn.execute(database_now()).scalar_one()
        moved = conn.execute(advance_due_jobs(TABLE), {"queues": ["images"], "advance": advance,
                                                       "since": since, "now": now}).scalars().all()
    return _Moved(moved, now)


def _run_at(engine):
    with engine.connect() as conn:
        return dict(conn.execute(select(TABLE.c.id, TABLE.c.run_at)).all())
