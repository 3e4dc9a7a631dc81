"""Section 17, history: what finished jobs cost the live queue.

Two measurements of the issue "storage that does not decay", each on the plain job table and on
one converted to the partitioned layout (``sqla-queue db partition-history``, in a database of
its own so the sections after this one see the plain table):

* **Retention.** `retention_jobs` completed jobs that finished 8 days ago beside a live backlog
  of `RETENTION_LIVE` pending jobs; ``queue.prune(completed_after=7 days, batch_size=...)``
  (the library's retention, what ``sqla-queue prune`` runs) deletes them all. Measured: its
  seconds (the client only sends statements, so this is database time), the reference claim's
  latency sampled every `PROBE_EVERY` seconds meanwhile (a lock on the live rows would show
  there), and the dead tuples the prune left for VACUUM, which a DELETE always leaves behind.
  Partitioned, the jobs sit archived in their day's partition, and the prune drops it.
* **History size.** The claim (``queue.claim(limit=1)``, as section 5) against a backlog of
  `HISTORY_PENDING` pending jobs, first with no finished jobs in the table, then with
  `history_jobs` completed jobs spread over the last 7 days (one week of retention), both
  vacuumed and analysed; the claims of the two states are timed in separate blocks, each the
  median of its repetitions. Partitioned, the kept jobs are archived in their days' partitions.

Targets: retention of 1,000,000 finished jobs in <= 1 s of database time with no long lock on
the live table; the claim with 10,000,000 finished jobs kept within 1.1x of an empty history.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from statistics import median

from sqlalchemy import create_engine, func, select
from sqlalchemy.pool import NullPool

from sqla_queue.ops.storage import partition_history
from sqla_queue.sql import history as history_sql
from sqla_queue.states import JobStatus, state_of
from sqla_queue.tables import jobs

from . import raw_sql, tables
from .bench_app import make_queue
from .claim_cost import _WARM_UP, _median_us, _ours
from .server import Database, sibling_database
from .sizes import Size
from .stats import summary

RETENTION_LIVE = 10_000
HISTORY_PENDING = 10_000
PROBE_EVERY = 0.05
PRUNE_BATCH = 5_000
RETENTION_TARGET_S = 1.0
HISTORY_TARGET = 1.1
COMPLETED = state_of(JobStatus.COMPLETED)
# the table claims write: the job table, or its live partition once partitioned
DEAD_TUPLES = (f"SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname IN ('{raw_sql.TABLE}', '{raw_sql.TABLE}_live') "
               "ORDER BY relname DESC LIMIT 1")


def run(db: Database, size: Size, log) -> dict:
    out = {"plain": _layout(db, size, log, partitioned=False)}
    with sibling_database(db) as other:
        out["partitioned"] = _layout(other, size, log, partitioned=True)
    return out


def _layout(db: Database, size: Size, log, *, partitioned: bool) -> dict:
    if partitioned:
        engine = create_engine(db.sqlalchemy_url, poolclass=NullPool)
        try:
            partition_history(engine)
        finally:
            engine.dispose()
    name = "partitioned" if partitioned else "plain"
    return {"retention": _retention(db, size.retention_jobs, lambda m: log(f"{name} {m}"), partitioned),
            "history": _history(db, size, lambda m: log(f"{name} {m}"), partitioned)}


def _fill_finished(db: Database, n: int, newest: timedelta, span: timedelta, archived: bool) -> None:
    """`n` completed jobs that finished between `newest` + `span` and `newest` ago; `archived`:
    in their days' history partitions (made here)."""
    if archived:
        engine = create_engine(db.sqlalchemy_url, poolclass=NullPool)
        try:
            with engine.begin() as conn:
                now = conn.execute(select(func.now())).scalar_one()
                day, last = (now - newest - span).date(), (now - newest).date()
                while day <= last:
                    conn.execute(history_sql.create_day_partition(conn, jobs, COMPLETED, day))
                    day += timedelta(days=1)
        finally:
            engine.dispose()
    with db.connect(autocommit=True) as conn:
        conn.execute(raw_sql.FILL_FINISHED_AGO, {"queue": raw_sql.QUEUE, "task": raw_sql.TASK, "n": n,
                                                 "newest": newest, "span": span, "archived": archived})


def _retention(db: Database, finished: int, log, partitioned: bool) -> dict:
    tables.reset(db, pending=RETENTION_LIVE)
    _fill_finished(db, finished, timedelta(days=8), timedelta(hours=1), partitioned)
    with db.connect(autocommit=True) as conn:
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
        dead = conn.execute(DEAD_TUPLES).fetchone()[0] or 0
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


def _history(db: Database, size: Size, log, partitioned: bool) -> dict:
    tables.reset(db, pending=HISTORY_PENDING)
    empty = _claims(db, size, log, "empty history")
    tables.reset(db)
    began = time.perf_counter()
    _fill_finished(db, size.history_jobs, timedelta(0), timedelta(days=7), partitioned)
    with db.connect(autocommit=True) as conn:
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
    """The section's targets, judged on the partitioned layout (the plain table's figures are
    its baseline): ``target``, ``measured``, ``met``."""
    found = (results.get("history") or {}).get("partitioned")
    if not found:
        return []
    r, h = found["retention"], found["history"]
    return [
        {"target": f"Retention of {r['finished']:,} finished jobs in <= {RETENTION_TARGET_S:.0f} s of database time "
                   "(partitioned layout)",
         "measured": f"{r['seconds']:.2f} s ({r['pruned']:,} pruned; {r['dead_tuples_after']:,} dead tuples left "
                     "in the live table)",
         "met": r["seconds"] <= RETENTION_TARGET_S and r["pruned"] >= r["finished"]},
        {"target": f"Claim with {h['finished']:,} finished jobs kept within {HISTORY_TARGET}x of an empty history "
                   "(partitioned layout)",
         "measured": f"{h['ratio']:.2f}x ({h['kept_us']['median']:,.0f} vs {h['empty_us']['median']:,.0f} µs)",
         "met": h["ratio"] <= HISTORY_TARGET},
    ]
