"""Section 4, idle wake-up latency: enqueue-to-handler-start while a worker rests.

One worker process (concurrency 10, poll interval 0.5 s, LISTEN on) waits; the parent enqueues
one job at a time with sqla_queue, each once the previous one has completed and the worker has
then rested for at least two poll intervals (1.0-1.2 s), with ``time.monotonic()`` before the
enqueue call in the payload. The handler records its own start on the same clock. A resting
worker claims only when notified or when its poll interval ends, so these figures are the
LISTEN/NOTIFY wake-up (a poll lands in the few milliseconds after a commit rarely). Two
figures: from the enqueue call's return (the job is committed: the wake-up proper,
LISTEN/NOTIFY plus claim) and from the call's start (adds the enqueue's own INSERT and commit:
what a caller sees from "enqueue called" to "handler running").
"""

from __future__ import annotations

import random
import time

from . import tables
from .bench_app import make_queue
from .procs import run_workers
from .raw_sql import TASK
from .server import Database, wait_until
from .sizes import Size
from .stats import percentile, summary

CONCURRENCY = 10
POLL_INTERVAL = 0.5
REST = (2 * POLL_INTERVAL, 2 * POLL_INTERVAL + 0.2)  # seconds of rest before each job


def run(db: Database, size: Size, log) -> dict:
    figures: dict = {k: [] for k in ("p50_ms", "p99_ms", "call_p50_ms", "call_p99_ms", "enqueue_call_ms")}
    all_ms = []
    for rep in range(size.repeat):
        from_commit, from_call, call_ms = _once(db, size.latency_jobs)
        figures["p50_ms"].append(percentile(from_commit, 50))
        figures["p99_ms"].append(percentile(from_commit, 99))
        figures["call_p50_ms"].append(percentile(from_call, 50))
        figures["call_p99_ms"].append(percentile(from_call, 99))
        figures["enqueue_call_ms"].append(percentile(call_ms, 50))
        all_ms.extend(from_commit)
        log(f"wake-up latency rep {rep + 1}: after commit p50 {figures['p50_ms'][-1]:.2f} ms, "
            f"p99 {figures['p99_ms'][-1]:.2f} ms; from enqueue call p50 {figures['call_p50_ms'][-1]:.2f} ms")
    return {**{k: summary(v) for k, v in figures.items()}, "samples_ms": all_ms,
            "jobs": size.latency_jobs, "concurrency": CONCURRENCY,
            "poll_interval_s": POLL_INTERVAL, "rest_s": list(REST)}


def _once(db: Database, jobs: int) -> tuple[list[float], list[float], list[float]]:
    tables.reset(db)
    queue = make_queue(db.sqlalchemy_url)
    queue.enqueue(TASK, {"t0": time.monotonic()})  # warm the parent's connection and statement
    returned: dict[float, float] = {}  # t0 -> when that enqueue call returned
    rng = random.Random(7)

    def enqueue_spaced(sync):
        sync["listening"].wait(timeout=30)
        for n in range(jobs):
            wait_until(lambda: tables.completed(db) >= n + 1, timeout=30, step=0.02)
            time.sleep(rng.uniform(*REST))
            t0 = time.monotonic()
            queue.enqueue(TASK, {"t0": t0})
            returned[round(t0, 6)] = time.monotonic()
        wait_until(lambda: tables.completed(db) >= jobs + 1, timeout=30, step=0.05)
        sync["stop"].set()

    try:
        result = run_workers(db.url, processes=1, mode="serve", while_running=enqueue_spaced,
                             options={"concurrency": CONCURRENCY, "poll_interval": POLL_INTERVAL})
    finally:
        queue.engine.dispose()
    starts = result["workers"][0]["starts"]
    # The warm-up job was enqueued before the worker started: not an idle wake-up.
    measured = [(t0, start) for t0, start in starts if round(t0, 6) in returned]
    from_commit = [(start - returned[round(t0, 6)]) * 1e3 for t0, start in measured]
    from_call = [(start - t0) * 1e3 for t0, start in measured]
    call_ms = [(returned[round(t0, 6)] - t0) * 1e3 for t0, _ in measured]
    return from_commit, from_call, call_ms
