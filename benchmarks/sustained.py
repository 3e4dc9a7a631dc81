"""Section 6, sustained drain: a large backlog drained by 2 worker processes x concurrency 10,
completions counted per window, under table settings that decide how fast dead index entries
go away.

Claimed rows leave dead entries in the pending partial index until a VACUUM removes them, and
every claim walks past them, so a claim slows down as it works. The variants:

* ``default``: the table as the migrations create it, server-default autovacuum.
* ``autovacuum``: per-table autovacuum that fires on dead tuples alone (scale factor 0,
  threshold 10,000, no cost delay). It still waits for ``autovacuum_naptime`` (1 min, a server
  setting the benchmark leaves at its default) between looks at the database.
* ``autovacuum + fillfactor 70``: as above, with room on each page for new row versions.
* ``autovacuum + pruning``: as above, and completed jobs older than 1 s deleted every second
  in batches of 5,000, as a retention job would: with sqla_queue's own prune statement where
  the library has one (``sqla_queue.sql.prune.prune_finished``, ``sqla_queue.sql.ops`` before
  it was renamed), else with the equivalent
  ``raw_sql.PRUNE_COMPLETED`` (the report says which).
* ``VACUUM every window``: the harness runs a plain ``VACUUM`` of the table once per window,
  the cadence a library-owned vacuum could keep (a reference point, not a setting).

Completions are counted through the library's ``sqla_queue_job_completed`` hook into a shared
counter the parent samples every 0.2 s; windows are interpolated from those samples. A variant
stops at its size's time cap if the backlog is not drained by then (the report says so).

``fed at the drain rate`` is the issue's sustained drain ("storage that does not decay"): the table
starts empty and the parent enqueues the same number of jobs while the workers drain them, at
the rate section 3's 2 x 10 drain measured (a calibration drain when that section did not run),
in a batch every 0.1 s, until all were enqueued; windows run until the last one completed (or a
cap of twice the feeding time). Default table, no VACUUM but autovacuum's own.

As a reference, the same backlog is also drained by the reference raw claim + completion through
pgbench (4 clients, the batch size the 2 x 10 drain used, default table) for up to 60 s, its rate
per window read from pgbench's ``-P`` progress lines: does the raw claim slow down here?
"""

from __future__ import annotations

import importlib
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from sqla_queue import JobStatus
from sqla_queue.models import Job

from . import pgbench, raw_sql, tables
from .drain import drain_once
from .procs import CTX, run_workers
from .server import Database
from .sizes import Size
from .stats import summary, window_rates

PROCESSES, CONCURRENCY = 2, 10
AUTOVACUUM = ("autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000, "
              "autovacuum_vacuum_cost_delay = 0")


@dataclass(frozen=True)
class Variant:
    name: str
    options: str | None = None
    prune: bool = False
    vacuum_each_window: bool = False
    fed: bool = False


FED = "fed at the drain rate"
FEED_EVERY = 0.1

VARIANTS = (
    Variant("default"),
    Variant("autovacuum", AUTOVACUUM),
    Variant("autovacuum + fillfactor 70", AUTOVACUUM + ", fillfactor = 70"),
    Variant("autovacuum + pruning", AUTOVACUUM, prune=True),
    Variant("VACUUM every window", vacuum_each_window=True),
    Variant(FED, fed=True),
)


def run(db: Database, size: Size, log, *, raw_batch: int = 4, drain_rate: float | None = None) -> dict:
    out = {}
    feed = drain_rate or drain_once(db, size.horizon_calibration_jobs, PROCESSES, CONCURRENCY, log=log)["jobs_per_s"]
    for variant in VARIANTS:
        reps = [_fed(db, size, feed) if variant.fed else _once(db, size, variant)
                for _ in range(size.sustained_repeat)]
        first, last = reps[0]["windows"][:1], reps[0]["windows"][-1:]
        log(f"sustained {variant.name}: {reps[0]['completed']:,} jobs in {reps[0]['seconds']:.0f} s, "
            f"first window {first[0] if first else 0:,.0f}/s, last {last[0] if last else 0:,.0f}/s")
        out[variant.name] = _summarise(variant, reps)
    if db.pgbench:
        out["raw reference (pgbench)"] = _raw_reference(db, size, raw_batch)
        windows = out["raw reference (pgbench)"]["windows"]
        log(f"sustained raw reference, batch {raw_batch}: windows {', '.join(f'{w:,.0f}' for w in windows)}")
    out["_config"] = {"processes": PROCESSES, "concurrency": CONCURRENCY, "jobs": size.sustained_jobs,
                      "window_s": size.sustained_window, "max_seconds": size.sustained_max_seconds,
                      "autovacuum_options": AUTOVACUUM, "prune_method": prune_method(), "feed_per_s": feed}
    return out


def _raw_reference(db: Database, size: Size, batch: int) -> dict:
    tables.reset(db, pending=size.sustained_jobs)
    before = tables.sizes(db)
    seconds = int(min(size.sustained_max_seconds, 60))  # pgbench is fast: keep inside the backlog
    window = max(1, int(size.sustained_window))
    script = raw_sql.inline_batch(raw_sql.PGBENCH_CLAIM_AND_COMPLETE, batch)
    out = pgbench.run(db, raw_sql.pgbench_script(script), clients=4, seconds=seconds, progress=window,
                      defines={"queue": raw_sql.QUEUE, "worker": "pgbench"})
    completed = tables.completed(db)
    # tps counts script runs, each claiming a full batch while the backlog lasts; once it runs
    # out, runs claim nothing, so windows stop at the one in which the completed rows ran out.
    windows, total = [], 0.0
    for _, tps in out["progress"]:
        jobs = tps * window * batch
        if total + jobs > completed * 1.01:
            break
        total += jobs
        windows.append(jobs / window)
    variant = Variant(f"raw reference (pgbench, batch {batch}, 4 clients)")
    rep = {"windows": windows, "completed": completed, "seconds": out["seconds"],
           "capped": completed < size.sustained_jobs, "pruned": 0, "vacuums": 0,
           "end": _end_sizes(db, before)}
    return _summarise(variant, [rep])


def _end_sizes(db: Database, before: dict) -> dict:
    """Sizes at the end; vacuum counts as the change during this variant (the statistics are
    cumulative for the table over the whole benchmark)."""
    end = tables.sizes(db)
    for key in ("autovacuum_count", "vacuum_count"):
        end[key] = end[key] - before[key]
    return end


def _once(db: Database, size: Size, variant: Variant) -> dict:
    tables.reset(db, pending=size.sustained_jobs, options=variant.options)
    before = tables.sizes(db)
    counters = [CTX.RawValue("q", 0) for _ in range(PROCESSES)]
    helpers = _Helpers(db, variant, size.sustained_window)
    samples: list[tuple[float, int]] = []

    def watch(sync):
        t0 = time.monotonic()
        helpers.start()
        while True:
            elapsed, done = time.monotonic() - t0, sum(c.value for c in counters)
            samples.append((elapsed, done))
            if done >= size.sustained_jobs or elapsed >= size.sustained_max_seconds:
                break
            time.sleep(0.2)
        sync["stop"].set()
        helpers.stop()

    run_workers(db.url, processes=PROCESSES, mode="drain", counters=counters, while_running=watch,
                options={"concurrency": CONCURRENCY})
    end = _end_sizes(db, before)
    seconds, completed = samples[-1]
    return {
        "windows": window_rates(samples, size.sustained_window),
        "completed": completed,
        "seconds": seconds,
        "capped": completed < size.sustained_jobs,
        "pruned": helpers.pruned,
        "vacuums": helpers.vacuums,
        "end": end,
    }


def _fed(db: Database, size: Size, per_s: float) -> dict:
    """`size.sustained_jobs` jobs enqueued at `per_s` into an empty default table while the
    workers drain them; windows until the last one completed (cap: twice the feeding time)."""
    tables.reset(db)
    before = tables.sizes(db)
    counters = [CTX.RawValue("q", 0) for _ in range(PROCESSES)]
    cap = max(size.sustained_max_seconds, 2 * size.sustained_jobs / per_s)
    samples: list[tuple[float, int]] = []
    fed = {"jobs": 0}

    def watch(sync):
        stop = threading.Event()
        feeder = threading.Thread(target=_feed, args=(db, per_s, size.sustained_jobs, fed, stop), daemon=True)
        t0 = time.monotonic()
        feeder.start()
        while True:
            elapsed, done = time.monotonic() - t0, sum(c.value for c in counters)
            samples.append((elapsed, done))
            if done >= size.sustained_jobs or elapsed >= cap:
                break
            time.sleep(0.2)
        stop.set()
        feeder.join(timeout=30)
        sync["stop"].set()

    run_workers(db.url, processes=PROCESSES, mode="run", counters=counters, while_running=watch,
                options={"concurrency": CONCURRENCY})
    seconds, completed = samples[-1]
    return {"windows": window_rates(samples, size.sustained_window), "completed": completed, "seconds": seconds,
            "capped": completed < size.sustained_jobs, "pruned": 0, "vacuums": 0, "fed": fed["jobs"],
            "end": _end_sizes(db, before)}


def _feed(db: Database, per_s: float, total: int, fed: dict, stop: threading.Event) -> None:
    """Enqueue at `per_s`, a batch every FEED_EVERY seconds on the clock (a late batch catches
    up), until `total` were enqueued."""
    began = time.monotonic()
    with db.connect(autocommit=True) as conn:
        while fed["jobs"] < total and not stop.wait(FEED_EVERY):
            owed = min(total, int((time.monotonic() - began) * per_s)) - fed["jobs"]
            if owed > 0:
                conn.execute(raw_sql.FEED_PENDING, {"queue": raw_sql.QUEUE, "task": raw_sql.TASK, "n": owed})
                fed["jobs"] += owed


class _Helpers:
    """What runs beside the workers in the parent: the pruner, or the per-window VACUUM."""

    def __init__(self, db: Database, variant: Variant, window: float) -> None:
        self.db, self.variant, self.window = db, variant, window
        self.pruned = self.vacuums = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        if self.variant.prune:
            self._threads.append(threading.Thread(target=self._prune, daemon=True))
        if self.variant.vacuum_each_window:
            self._threads.append(threading.Thread(target=self._vacuum, daemon=True))
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)

    def _prune(self) -> None:
        delete = _prune_statement()
        while not self._stop.wait(1.0):
            while True:
                deleted = delete(self.db)
                self.pruned += deleted
                if deleted < PRUNE_BATCH or self._stop.is_set():
                    break

    def _vacuum(self) -> None:
        with self.db.connect(autocommit=True) as conn:
            while not self._stop.wait(self.window):
                conn.execute("VACUUM sqla_queue_jobs")
                self.vacuums += 1


PRUNE_BATCH = 5_000
PRUNE_AGE = timedelta(seconds=1)


def _library_prune():
    """sqla_queue's prune statement builder and where it lives, or None for a version without one
    (it moved from ``sql.ops`` to ``sql.prune``; both are found, so before/after runs compare)."""
    for module in ("sqla_queue.sql.prune", "sqla_queue.sql.ops"):
        try:
            return importlib.import_module(module).prune_finished, f"{module}.prune_finished"
        except (ImportError, AttributeError):
            continue
    return None


def prune_method() -> str:
    found = _library_prune()
    return found[1] if found else "raw_sql.PRUNE_COMPLETED (this sqla_queue has no prune statement)"


def _prune_statement():
    """One bounded prune: returns how many completed jobs it deleted."""
    found = _library_prune()
    if found is None:
        def raw(db: Database) -> int:
            with db.connect(autocommit=True) as conn:
                return conn.execute(raw_sql.PRUNE_COMPLETED, {"age": PRUNE_AGE, "limit": PRUNE_BATCH}).fetchone()[0]
        return raw

    statement = found[0](Job.__table__, JobStatus.COMPLETED)

    def library(db: Database) -> int:
        engine = create_engine(db.sqlalchemy_url, poolclass=NullPool)  # one batch a second
        try:
            with engine.begin() as conn:
                return conn.execute(statement, {"age": PRUNE_AGE, "limit": PRUNE_BATCH}).scalar()
        finally:
            engine.dispose()
    return library


def _summarise(variant: Variant, reps: list[dict]) -> dict:
    def ratio(r):
        w = r["windows"]
        return w[-1] / w[0] if len(w) >= 2 and w[0] else None

    firsts = [r["windows"][0] for r in reps if r["windows"]]
    lasts = [r["windows"][-1] for r in reps if r["windows"]]
    ratios = [x for x in (ratio(r) for r in reps) if x is not None]
    rates = [r["completed"] / r["seconds"] for r in reps if r["seconds"]]
    return {
        "options": variant.options, "prune": variant.prune, "vacuum_each_window": variant.vacuum_each_window,
        "first": summary(firsts), "last": summary(lasts), "last_over_first": summary(ratios),
        "overall": summary(rates), "windows": reps[0]["windows"], "completed": reps[0]["completed"],
        "seconds": reps[0]["seconds"], "capped": any(r["capped"] for r in reps),
        "pruned": reps[0]["pruned"], "vacuums": reps[0]["vacuums"], "end": reps[0]["end"], "fed": reps[0].get("fed"),
    }
