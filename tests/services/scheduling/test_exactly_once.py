"""Exactly once under concurrent schedulers: threads, each a worker's queue on connections of
its own, race the same ticks; the database lets one transaction per tick insert its job."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone

from sqlalchemy import text

import sqla_queue as sq
from sqla_queue.services.scheduler import fire_tick

from race_fixtures import THREADS

T0 = datetime(2026, 5, 4, 12, 0, tzinfo=timezone.utc)
ROUNDS = 15


def racers(make_engine, **schedule) -> list[sq.Queue]:
    """One queue per thread, as each worker process has its own, all declaring one schedule."""
    engine = make_engine()
    queues = []
    for _ in range(THREADS):
        queue = sq.Queue(engine, load_entrypoints=False)
        queue.periodic(queue.task(name="beat")(lambda payload, ctx: None), **schedule)
        queues.append(queue)
    return queues


def ticks_enqueued(make_engine) -> Counter:
    with make_engine().connect() as conn:
        rows = conn.execute(text("SELECT scheduled_at FROM sqla_queue_jobs")).scalars().all()
    return Counter(rows)


def test_racing_schedulers_enqueue_each_tick_once(make_engine, race):
    queues = racers(make_engine, every=1, skip_if_pending=False)  # every tick, none run
    inserted = 0
    for n in range(1, ROUNDS + 1):
        now = T0 + timedelta(seconds=n, milliseconds=300)
        # Every thread sees the same tick; clocks differ by a few milliseconds.
        results = race(lambda i: fire_tick(queues[i].core, queues[i].schedules[0], now + timedelta(milliseconds=i),
                                           not_before=T0))
        assert sorted(results) == [0] * (THREADS - 1) + [1], f"round {n}: {results}"
        inserted += sum(results)
    counts = ticks_enqueued(make_engine)
    assert counts == Counter({T0 + timedelta(seconds=n): 1 for n in range(1, ROUNDS + 1)})
    assert inserted == ROUNDS


def test_racing_backfills_enqueue_each_missed_tick_once(make_engine, race):
    queues = racers(make_engine, every=1, backfill=True)
    fire_tick(queues[0].core, queues[0].schedules[0], T0, not_before=T0 - timedelta(seconds=1))
    for n in range(1, ROUNDS + 1):
        # Each round skips a few seconds; the threads' clocks straddle a tick.
        base = T0 + timedelta(seconds=5 * n, milliseconds=500)
        race(lambda i: fire_tick(queues[i].core, queues[i].schedules[0], base + timedelta(milliseconds=400 * (i % 3)),
                                 not_before=T0))
    counts = ticks_enqueued(make_engine)
    assert set(counts.values()) == {1}, [tick for tick, count in counts.items() if count > 1]
    assert sorted(counts) == [T0 + timedelta(seconds=s) for s in range(0, 5 * ROUNDS + 2)]
