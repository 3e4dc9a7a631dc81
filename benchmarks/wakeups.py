"""Section 10, wake-ups under concurrent enqueues: 32 single-job enqueuers at once, with the
workers' wake-ups on and off.

A commit carrying a NOTIFY holds PostgreSQL's database-wide notify lock through its WAL flush,
so enqueues that notify in their own transaction commit one at a time. `Queue.enqueue` (no
session, no connection) commits without one and its Queue's notifier announces the queue right
after (sqla_queue/_notifier.py). Measured three ways, alternating, each for a fixed time:

* **on**: `queue.enqueue(task, payload)` as an application calls it;
* **off**: the same with the notifier's send replaced by nothing: no wake-up at all, the
  ceiling the target compares against;
* **in the caller's transaction**: ``with engine.begin() as conn: queue.enqueue(...,
  connection=conn)``, where the INSERT's NOTIFY rides on the caller's commit (what every
  enqueue did before the notifier, and still what an enqueue inside a host transaction does).

Two layouts of the 32 enqueuers: 32 processes of one thread each (a pre-forked web server), and
one process of 32 threads sharing one Queue (its engine's pool as `Queue(url)` builds it).
"""

from __future__ import annotations

import multiprocessing
import threading
import time

from sqlalchemy import create_engine

from . import tables
from .bench_app import make_queue
from .raw_sql import TASK
from .server import Database
from .sizes import Size
from .stats import summary

ENQUEUERS = 32
LAYOUTS = {"32 processes x 1 thread": (ENQUEUERS, 1), "1 process x 32 threads": (1, ENQUEUERS)}
VARIANTS = ("on", "off", "caller_transaction")


def run(db: Database, size: Size, log) -> dict:
    seconds = size.wakeup_seconds
    out: dict = {"enqueuers": ENQUEUERS, "seconds": seconds, "layouts": {}}
    for layout, (processes, threads) in LAYOUTS.items():
        rates: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
        for rep in range(size.repeat):
            for variant in VARIANTS:
                tables.reset(db)
                rate = _measure(db.sqlalchemy_url, variant, processes, threads, seconds)
                rates[variant].append(rate)
                log(f"wake-ups {layout}, {variant}, rep {rep + 1}: {rate:,.0f} enqueues/s")
        out["layouts"][layout] = {variant: summary(values) for variant, values in rates.items()}
    return out


def _measure(url: str, variant: str, processes: int, threads: int, seconds: float) -> float:
    """Enqueues per second of `processes` x `threads` enqueuers running `variant` together."""
    ctx = multiprocessing.get_context("fork")
    ready, go = ctx.Barrier(processes + 1), ctx.Event()
    counts = ctx.Queue()
    children = [ctx.Process(target=_enqueuer_process, args=(url, variant, threads, seconds, ready, go, counts))
                for _ in range(processes)]
    for child in children:
        child.start()
    ready.wait(timeout=120)
    go.set()
    total = sum(counts.get(timeout=seconds + 120) for _ in children)
    for child in children:
        child.join(timeout=60)
    return total / seconds


def _enqueuer_process(url, variant, threads, seconds, ready, go, counts) -> None:
    queue = make_queue(url)
    engine = create_engine(url, pool_size=threads, max_overflow=0) if variant == "caller_transaction" else None
    if variant == "off":
        queue.core.enqueuer.notifier._send = lambda queues: None  # the ceiling: nobody is woken
    enqueue = _enqueue_function(queue, engine)
    enqueue({"warm": True})
    done = [0] * threads

    def loop(index: int) -> None:
        go.wait()
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:
            enqueue({"n": n})
            n += 1
        done[index] = n

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    ready.wait(timeout=120)
    for worker in workers:
        worker.join()
    counts.put(sum(done))
    queue.engine.dispose()
    if engine is not None:
        engine.dispose()


def _enqueue_function(queue, engine):
    if engine is None:
        return lambda payload: queue.enqueue(TASK, payload)

    def in_callers_transaction(payload: dict) -> None:
        with engine.begin() as conn:
            queue.enqueue(TASK, payload, connection=conn)

    return in_callers_transaction
