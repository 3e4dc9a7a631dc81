"""Section 8, asyncio: async enqueue and async handlers, each beside its sync twin in the same run.

* ``enqueue_many_async(1,000)`` from an asyncio program (a spawned process running
  ``asyncio.run``; each call its own transaction) against ``enqueue_many(1,000)`` measured as
  section 2 does it, on the same kind of engine on both sides, since that decides the path:
  a Queue built from a URL (``postgresql+psycopg://`` / ``postgresql+psycopg_async://``) runs
  its own engines with the driver fast path; a Queue on the application's ``Engine`` /
  ``AsyncEngine`` sends its statements through SQLAlchemy.
* An ``async def`` no-op handler drained by one worker process at concurrency 10 and 50, against
  the sync no-op handler at the same shape: both through `drain.drain_once` (spawned worker
  process, ``worker.run(until_empty=True)``, which runs async handlers on a loop of its own).
* ``await asyncio.sleep(0.1)`` in every one of `Size.asyncio_sleep_jobs` jobs, one worker at
  concurrency 100: seconds from the start signal to the last ``completed_at``. Run one after
  another that is 100 s per 1,000 jobs; on one event loop, about 1 s.

Each sync/async pair is measured back to back within a repetition (which one goes first
alternates), so every ratio compares two runs that shared the machine's state; the ratio quoted
is the median of the per-repetition ratios.
"""

from __future__ import annotations

import asyncio
import queue as queue_module
import time

from sqlalchemy import create_engine

from . import enqueue, tables
from .bench_app import SLEEP_SECONDS, make_queue
from .drain import drain_once
from .procs import CTX
from .raw_sql import TASK
from .server import Database
from .sizes import Size
from .stats import summary

MANY = 1000  # jobs per enqueue_many / enqueue_many_async call
ENGINES = ("url", "engine")  # Queue(URL); Queue(Engine) and Queue(AsyncEngine)
DRAIN_CONCURRENCY = (10, 50)  # one worker process at each
SLEEP_CONCURRENCY = 100


def run(db: Database, size: Size, log, *, drain_concurrency: tuple[int, ...] = DRAIN_CONCURRENCY) -> dict:
    total = max(MANY, size.enqueue_many_total)
    enq: dict = {e: {"sync": [], "async": []} for e in ENGINES}
    drains: dict = {c: {"sync": [], "async": []} for c in drain_concurrency}
    sleeps: list[dict] = []
    for rep in range(size.repeat):
        order = ("sync", "async") if rep % 2 == 0 else ("async", "sync")
        for engine in ENGINES:
            for kind in order:
                rate = (many_sync if kind == "sync" else many_async)(db, MANY, total, engine=engine)
                enq[engine][kind].append(rate)
                log(f"asyncio: enqueue_many{'_async' if kind == 'async' else ''}({MANY:,}), Queue on "
                    f"{'a URL' if engine == 'url' else 'the application engine'}, rep {rep + 1}: {rate:,.0f} jobs/s")
        for concurrency in drain_concurrency:
            for kind in order:
                out = drain_once(db, size.drain_jobs, 1, concurrency, log=log, handler=kind)
                drains[concurrency][kind].append(out)
                log(f"asyncio: {kind} no-op drain 1 proc x concurrency {concurrency} rep {rep + 1}: "
                    f"{out['jobs_per_s']:,.0f} jobs/s, batch {out['batch'] or 0:.1f}")
        out = drain_once(db, size.asyncio_sleep_jobs, 1, SLEEP_CONCURRENCY, log=log, handler="async_sleep")
        sleeps.append(out)
        log(f"asyncio: {out['jobs']:,} x asyncio.sleep({SLEEP_SECONDS:g}) at concurrency {SLEEP_CONCURRENCY} "
            f"rep {rep + 1}: {out['seconds']:.2f} s")
    return {
        "enqueue_many": {"calls_of": MANY, "jobs": MANY * (total // MANY),
                         **{e: _pair(runs["sync"], runs["async"]) for e, runs in enq.items()}},
        "drain": {f"1x{c}": _drain_pair(c, size.drain_jobs, runs) for c, runs in drains.items()},
        "sleep": {"jobs": size.asyncio_sleep_jobs, "concurrency": SLEEP_CONCURRENCY, "sleep_s": SLEEP_SECONDS,
                  "completed": min(o["jobs"] for o in sleeps), "incomplete": any(o["incomplete"] for o in sleeps),
                  **{k: summary(o[k] for o in sleeps) for k in ("seconds", "wall_seconds", "jobs_per_s")}},
    }


def many_sync(db: Database, n: int, total: int, *, engine: str) -> float:
    """``enqueue_many`` in calls of `n`, as section 2 measures it, on a Queue built from the URL
    or from an Engine; its connections are closed before the drains (which wait for the
    database's other backends to exit before reading the server's counters)."""
    bound = create_engine(db.sqlalchemy_url) if engine == "engine" else None
    queue = make_queue(bound if bound is not None else db.sqlalchemy_url)
    try:
        return enqueue._many(db, queue, n, total)
    finally:
        (bound or queue.engine).dispose()


def many_async(db: Database, n: int, total: int, *, engine: str) -> float:
    """``enqueue_many_async`` in calls of `n`, measured like `many_sync` (empty vacuumed table,
    connection and statements warmed, payloads built before the clock) in an asyncio program
    of its own, whose connections end with it."""
    tables.reset(db)
    results = CTX.Queue()
    proc = CTX.Process(target=_asyncio_program, args=(db.sqlalchemy_async_url, engine, n, total, results))
    proc.start()
    try:
        out = _result_of(proc, results)
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
    if isinstance(out, str):
        raise RuntimeError(f"enqueue_many_async failed: {out}")
    return out


def _result_of(proc, results, timeout: float = 600.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            return results.get(timeout=0.5)
        except queue_module.Empty:
            if not proc.is_alive():
                return f"the asyncio program exited with code {proc.exitcode} and no result"
    return f"no result within {timeout:g} s"


def _asyncio_program(url: str, engine: str, n: int, total: int, results) -> None:
    try:
        results.put(asyncio.run(_timed_many_async(url, engine, n, total)))
    except BaseException as exc:
        results.put(repr(exc))
        raise


async def _timed_many_async(url: str, engine: str, n: int, total: int) -> float:
    from sqlalchemy.ext.asyncio import create_async_engine  # needs greenlet: only this section does

    bound = create_async_engine(url) if engine == "engine" else None
    queue = make_queue(bound if bound is not None else url)
    batches = [[{"task": TASK, "payload": {"i": b * n + i}} for i in range(n)] for b in range(total // n)]
    try:
        await queue.enqueue_async(TASK, {"warm": True})
        await queue.enqueue_many_async([{"task": TASK, "payload": {"warm": i}} for i in range(2)])
        t0 = time.monotonic()
        for batch in batches:
            await queue.enqueue_many_async(batch)
        return n * len(batches) / (time.monotonic() - t0)
    finally:
        if bound is not None:
            await bound.dispose()


def _pair(sync: list[float], asyn: list[float]) -> dict:
    return {"sync": summary(sync), "async": summary(asyn), "ratio": summary(a / s for a, s in zip(asyn, sync))}


def _drain_pair(concurrency: int, jobs: int, runs: dict) -> dict:
    fields = ("jobs_per_s", "batch", "client_cpu_us_per_job", "commits_per_job")
    out = {"processes": 1, "concurrency": concurrency, "jobs": jobs,
           "incomplete": any(o["incomplete"] for outs in runs.values() for o in outs)}
    for kind, outs in runs.items():
        out[kind] = {name: summary(o[name] for o in outs if o[name] is not None) for name in fields}
    out["ratio"] = summary(a["jobs_per_s"] / s["jobs_per_s"] for a, s in zip(runs["async"], runs["sync"]))
    return out
