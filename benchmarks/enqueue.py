"""Section 2, sqla_queue enqueue: one job per transaction, and enqueue_many of 100 and 1,000.

Same process, same server, same empty vacuumed table as the raw enqueue runs; payloads are built
before the clock starts, as the raw runs' parameters are.
"""

from __future__ import annotations

import time

from sqla_queue.db.notifier import flush_all

from . import tables
from .bench_app import make_queue
from .raw_sql import TASK
from .server import Database
from .sizes import Size
from .stats import summary

MANY_SIZES = (100, 1000)


def run(db: Database, size: Size, log) -> dict:
    queue = make_queue(db.sqlalchemy_url)
    values: dict = {"single": [], **{f"many_{n}": [] for n in MANY_SIZES}}
    try:
        for rep in range(size.repeat):
            values["single"].append(_single(db, queue, max(10, size.enqueue_single)))
            log(f"sqla_queue enqueue single rep {rep + 1}: {values['single'][-1]:,.0f} jobs/s")
            for n in MANY_SIZES:
                rate = _many(db, queue, n, max(n, size.enqueue_many_total))
                values[f"many_{n}"].append(rate)
                log(f"sqla_queue enqueue_many({n}) rep {rep + 1}: {rate:,.0f} jobs/s")
    finally:
        # The last enqueue's wake-up may still be pending on the notifier's thread: sent after
        # the dispose, it would open a connection that outlives the section, and every later
        # section's server counters would wait for that backend to exit.
        flush_all()
        queue.engine.dispose()
    return {k: summary(v) for k, v in values.items()}


def _warm(queue) -> None:
    queue.enqueue(TASK, {"warm": True})
    queue.enqueue_many([{"task": TASK, "payload": {"warm": i}} for i in range(2)])


def _single(db: Database, queue, count: int) -> float:
    tables.reset(db)
    _warm(queue)
    payloads = [{"i": i} for i in range(count)]
    t0 = time.monotonic()
    for payload in payloads:
        queue.enqueue(TASK, payload)
    return count / (time.monotonic() - t0)


def _many(db: Database, queue, n: int, total: int) -> float:
    tables.reset(db)
    _warm(queue)
    batches = [[{"task": TASK, "payload": {"i": b * n + i}} for i in range(n)] for b in range(total // n)]
    t0 = time.monotonic()
    for batch in batches:
        queue.enqueue_many(batch)
    return n * len(batches) / (time.monotonic() - t0)
