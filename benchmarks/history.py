"""Section 17, history: what finished jobs cost the live queue.

Two measurements of the issue "storage that does not decay", on the table as it is:

* **Retention.** `retention_jobs` completed jobs that finished 8 days ago beside a live backlog
  of `RETENTION_LIVE` pending jobs; ``queue.prune(completed_after=7 days, batch_size=...)``
  (the library's retention, what ``sqla-queue prune`` runs) deletes them all. Measured: its
  seconds (the client only sends statements, so this is database time), the reference claim's
  latency sampled every `PROBE_EVERY` seconds meanwhile (a lock on the live rows would show
  there), and the dead tuples the prune left for VACUUM, which a DELETE always leaves behind.
* **History size.** The claim (``queue.claim(limit=1)``, as section 5) against a backlog of
  `HISTORY_PENDING` pending jobs, first with no finished jobs in the table, then with
  `history_jobs` completed jobs spread over the last 7 days (one week of retention), both
  vacuumed and analysed; the claims of the two states are timed in separate blocks, each the
  median of its repetitions.

Targets: retention of 1,000,000 finished jobs in <= 1 s of database time with no long lock on
the live table; the claim with 10,000,000 finished jobs kept within 1.1x of an empty history.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from statistics import median

from . import raw_sql, tables
from .bench_app import make_queue
from .claim_cost import _WARM_UP, _median_us, _ours
from .server import Database
from .sizes import Size
from .stats import summary

RETENTION_LIVE = 10_000
HISTORY_PENDING = 10_000
PROBE_EVERY = 0.05
PRUNE_BATCH = 5_000
RETENTION_TARGET_S = 1.0
HISTORY_TARGET = 1.1
DEAD_TUPLES = f"SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = '{raw_sql.TABLE}'::regclass"


def run(db: Database, size: Size, log) -> dict:
    return {"retention": _retention(db, size.retention_jobs, log),
            "history": _history(db, size, log)}


def _retention(db: Database, finished: int, log) -> dict:
    tables.reset(db, pending=RETENTION_LIVE)
    with db.connect(autocommit=True) as conn:
        conn.execute(raw_sql.FILL_FINISHED_AGO, {"queue": raw_sql.QUEUE, "task": raw_sql.TASK, "n": finished,
                                                 "newest": timedelta(days=8), "span": timedelta(hours=1)})
        tables.settle(conn)
    queue = make_queue(db.sqlalchemy_url)
    probes: list[float] = []
    stop = threading.Event()
    prober = threading.Thread(target=_probe, args=(db, probes, stop), daemon=True)
    try:
        prober.start()
        time.sleep(0.5)  # a few probes before, as the baseline
        before = len(probes)
        began = time.perf_counter()
        result = queue.prune(completed_after=timedelta(days=7), batch_size=PRUNE_BATCH)
        seconds = time.perf_counter() - began
        during = probes[before:]
    finally:
        stop.set()
        prober.join(timeout=10)
        queue.engine.dispose()
    with db.connect(autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        dead = conn.execute(DEAD_TUPLES).fetchone()[0]
    out = {"finished": finished, "pruned": result.completed, "seconds": seconds, "batch_size": PRUNE_BATCH,
           "claim_ms_before": median(probes[:before]) if before else None,
           "claim_ms_during": summary(during) if during else None,
           "claim_ms_max_during": max(during) if during else None, "dead_tuples_after": dead}
    log(f"retention: pruned {result.completed:,} of {finished:,} finished jobs in {seconds:.2f} s, "
        f"claim max during {out['claim_ms_max_during'] or 0:.1f} ms, {dead:,} dead tuples left")
    return out


def _probe(db: Database, probes: list[float], stop: threading.Event) -> None:
    """The reference claim of one job, rolled back, every PROBE_EVERY seconds: its latency in ms."""
    params = {"queue": raw_sql.QUEUE, "batch": 1, "worker": "history-probe", "token": "probe"}
    with db.connect() as conn:
        while not stop.wait(PROBE_EVERY):
            began = time.perf_counter()
            conn.execute(raw_sql.CLAIM, params)
            probes.append((time.perf_counter() - began) * 1000)
            conn.rollback()


def _history(db: Database, size: Size, log) -> dict:
    tables.reset(db, pending=HISTORY_PENDING)
    empty = _claims(db, size, log, "empty history")
    tables.reset(db)
    with db.connect(autocommit=True) as conn:
        began = time.perf_counter()
        conn.execute(raw_sql.FILL_FINISHED_AGO, {"queue": raw_sql.QUEUE, "task": raw_sql.TASK,
                                                 "n": size.history_jobs, "newest": timedelta(0),
                                                 "span": timedelta(days=7)})
        tables.fill(conn, pending=HISTORY_PENDING)
        tables.settle(conn)
        log(f"history: {size.history_jobs:,} finished jobs written and vacuumed in {time.perf_counter() - began:.0f} s")
    kept = _claims(db, size, log, f"{size.history_jobs:,} finished")
    return {"pending": HISTORY_PENDING, "finished": size.history_jobs, "empty_us": summary(empty),
            "kept_us": summary(kept), "ratio": median(kept) / median(empty)}


def _claims(db: Database, size: Size, log, label: str) -> list[float]:
    queue = make_queue(db.sqlalchemy_url)
    reps = []
    try:
        for rep in range(size.repeat):
            reps.append(_median_us([_ours(queue) for _ in range(size.claim_samples + _WARM_UP)]))
            log(f"history: claim with {label}, rep {rep + 1}: {reps[-1]:.0f} us")
    finally:
        queue.engine.dispose()
    return reps


def rows(results: dict) -> list[dict]:
    """The section's targets: ``target``, ``measured``, ``met``."""
    found = results.get("history")
    if not found:
        return []
    r, h = found["retention"], found["history"]
    return [
        {"target": f"Retention of {r['finished']:,} finished jobs in <= {RETENTION_TARGET_S:.0f} s of database time",
         "measured": f"{r['seconds']:.2f} s ({r['pruned']:,} deleted in batches of {r['batch_size']:,}; "
                     f"{r['dead_tuples_after']:,} dead tuples left for VACUUM)",
         "met": r["seconds"] <= RETENTION_TARGET_S and r["pruned"] >= r["finished"]},
        {"target": f"Claim with {h['finished']:,} finished jobs kept within {HISTORY_TARGET}x of an empty history",
         "measured": f"{h['ratio']:.2f}x ({h['kept_us']['median']:,.0f} vs {h['empty_us']['median']:,.0f} µs)",
         "met": h["ratio"] <= HISTORY_TARGET},
    ]
