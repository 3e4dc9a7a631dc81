"""Separate processes: sqla_queue workers, and the psycopg clients of the raw-SQL limit.

``spawn`` (not fork): each process builds its own engine and connections from scratch, as a
worker process started by a process manager would. Each one warms its connections, waits at a
barrier, and only then starts the measured part.
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import threading
import time
from dataclasses import asdict

import psycopg

from . import raw_sql

CTX = mp.get_context("spawn")


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- sqla_queue worker ---------------------------------------------------------------------------

def worker_main(url: str, options: dict, mode: str, sync: dict, counter, handler: str = "sync",
                otel: bool = False, record_starts: bool = False) -> None:
    """One worker process.

    mode ``drain``: run until the queue is empty (or `stop` is set). mode ``serve``: run until
    `stop` is set, recording handler starts (the wake-up latency). mode ``run``: run no-op jobs
    until `stop` is set (a queue fed while it runs). `sync` holds the shared
    ``ready`` barrier, ``go``/``stop``/``release`` events, the ``listening`` barrier (serve mode)
    and the ``results`` queue. After putting its results the process waits for ``release`` (its
    worker has closed its connections by then: `benchmarks.cpu` counts their backends' CPU time
    from the postmaster's reaped children). `handler` picks
    the task's handler (bench_app.HANDLERS): an ``async def`` one runs on the worker's own loop.
    `otel` enables the OpenTelemetry plugin with a span-dropping SDK (`bench_app.make_queue`);
    `record_starts` records handler starts in any mode (``starts`` in the results).
    """
    from .bench_app import HandlerStarts, make_queue

    starts = HandlerStarts() if mode == "serve" or record_starts else None
    queue = make_queue(url, counter=counter, starts=starts, handler=handler, otel=otel)
    worker = queue.worker(queues=[raw_sql.QUEUE], **options)
    _warm(worker)
    threading.Thread(target=lambda: (sync["stop"].wait(), worker.stop()), daemon=True).start()
    if mode == "serve":
        threading.Thread(target=_announce_listening, args=(worker, sync["listening"]), daemon=True).start()
    sync["ready"].wait()
    sync["go"].wait()
    cpu0, t0 = _cpu_seconds(), time.monotonic()
    summary = worker.run(until_empty=(mode == "drain"))
    sync["results"].put({
        "summary": asdict(summary),
        "cpu_seconds": _cpu_seconds() - cpu0,
        "wall_seconds": time.monotonic() - t0,
        "starts": starts.starts if starts else [],
        "plugins": sorted(str(name) for name, _ in queue.plugin_manager.list_name_plugin()),
    })
    sync["release"].wait(60)


def _warm(worker) -> None:
    """Open the pool's connections before the clock starts (claim loop, handlers' flusher,
    lease keeper) so connection setup is not measured, and compile the claim statements the
    rounds will run: a long-lived worker compiles each once, while these drains run up to twenty
    fresh processes of about a thousand jobs each, where a limited queue's claim (~25 ms to
    build and compile) would weigh on the drain's rate as much as a tenth of the claims."""
    conns = [worker.engine.connect() for _ in range(min(worker.config.concurrency, 4) + 2)]
    for conn in conns:
        conn.close()
    core = worker.core
    core.executor.compiled(lambda fast: [(fast.round, {})])
    for name in worker.queues:
        core.limits.compile_claim(name)


def _announce_listening(worker, listening) -> None:
    """The latency run measures LISTEN wake-ups, so the parent starts enqueuing only once the
    listener (started inside `run`) is connected. `_listener_connected` is the worker's own
    test hook; after 10 s the run goes ahead anyway (polling still finds the jobs)."""
    end = time.monotonic() + 10
    while time.monotonic() < end and not worker._listener_connected():
        time.sleep(0.01)
    listening.wait()


# -- psycopg client of the raw-SQL limit ---------------------------------------------------------

def raw_claim_client(url: str, batch: int, batches: int, ready, results) -> None:
    """The reference claim + guarded completion, prepared, autocommit: 2 commits per batch."""
    worker = f"raw-{mp.current_process().pid}"
    claim = raw_sql.inline_batch(raw_sql.CLAIM, batch)
    with psycopg.connect(url, autocommit=True) as conn:
        _prepare_claim(conn, claim, worker)
        ready.wait()
        t0, jobs = time.monotonic(), 0
        for n in range(batches):
            token = f"{worker}-{n}"
            rows = conn.execute(claim, {"queue": raw_sql.QUEUE, "worker": worker,
                                                "token": token}, prepare=True).fetchall()
            if not rows:
                break
            done = conn.execute(raw_sql.COMPLETE, {"ids": [r[0] for r in rows], "token": token},
                                prepare=True).fetchall()
            jobs += len(done)
        results.put({"jobs": jobs, "start": t0, "end": time.monotonic()})


def _prepare_claim(conn, claim: str, worker: str) -> None:
    """Prepare both statements in a rolled-back transaction (no row changes; a prepared
    statement outlives the transaction that prepared it)."""
    with conn.transaction(force_rollback=True):
        conn.execute(claim, {"queue": raw_sql.QUEUE, "worker": worker, "token": "-"}, prepare=True)
        conn.execute(raw_sql.COMPLETE, {"ids": [0], "token": "-"}, prepare=True)


def run_raw_clients(url: str, *, clients: int, batch: int, jobs: int) -> dict:
    """`clients` processes claim+complete `jobs` in batches of `batch`; jobs/s over the span
    from the first client's start to the last client's end."""
    ready, results = CTX.Barrier(clients), CTX.Queue()
    batches = -(-jobs // (clients * batch))
    procs = [CTX.Process(target=raw_claim_client, args=(url, batch, batches, ready, results))
             for _ in range(clients)]
    for p in procs:
        p.start()
    outs = [results.get(timeout=900) for _ in procs]
    for p in procs:
        p.join()
    span = max(o["end"] for o in outs) - min(o["start"] for o in outs)
    done = sum(o["jobs"] for o in outs)
    return {"jobs": done, "seconds": span, "jobs_per_s": done / span}


def run_workers(url: str, *, processes: int, options: dict, mode: str = "drain", counters=None,
                before_go=None, while_running=None, after=None, handler: str = "sync", otel: bool = False,
                record_starts: bool = False) -> dict:
    """Start `processes` worker processes, wait until all are warm, call `before_go()`, start
    them together, call `while_running(sync)` (it may set ``sync["stop"]``), collect their
    results, call `after()` while their connections are still open, then let them exit.

    Returns the children's results and whatever the callbacks returned."""
    sync = {
        "ready": CTX.Barrier(processes + 1), "go": CTX.Event(), "stop": CTX.Event(),
        "release": CTX.Event(), "results": CTX.Queue(),
        "listening": CTX.Barrier(processes + 1) if mode == "serve" else None,
    }
    counters = counters or [None] * processes
    procs = [CTX.Process(target=worker_main, args=(url, options, mode, sync, counters[i], handler, otel, record_starts))
             for i in range(processes)]
    for p in procs:
        p.start()
    try:
        sync["ready"].wait(timeout=120)
        started = before_go() if before_go else None
        sync["go"].set()
        during = while_running(sync) if while_running else None
        outs = [sync["results"].get(timeout=1800) for _ in procs]
        finished = after() if after else None
        return {"workers": outs, "started": started, "during": during, "after": finished}
    finally:
        sync["stop"].set()
        sync["release"].set()
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
