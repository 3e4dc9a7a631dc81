"""Section 15, held horizon (the vacuum horizon of docs/how-to/operations.md, held): jobs flow in
at half the measured drain rate while 2 worker processes x concurrency 10 drain them, for the same span
twice: once as is, and once while a REPEATABLE READ transaction in another session holds the
vacuum horizon the whole time (what a forgotten ``BEGIN`` in psql, or a long report, does).

Per second, in both runs: completions, the claim's latency (a probe runs the reference claim for
one job every `PROBE_EVERY` seconds in a transaction it rolls back, so it walks the same pending
index the workers walk), and the table's dead tuples. In the held run, `doctor`'s vacuum horizon
check runs every `DOCTOR_EVERY` seconds: the section records when it first warned (its
``horizon_warning``, 60 s by default, scaled down to a tenth of the span for spans under ten
minutes) and when the claim's latency first reached twice its median over the first 10 % of
the run.

Targets (issue "storage that does not decay"): throughput with the holder at least 80 % of the
run without; the warning before the claim's latency doubled. The rate is section 3's 2 x 10
drain when this run measured it, else a calibration drain of `horizon_calibration_jobs`.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from statistics import median

from . import raw_sql, tables
from .drain import drain_once
from .procs import CTX, run_workers
from .server import Database
from .sizes import Size

PROCESSES, CONCURRENCY = 2, 10
PROBE_EVERY = 1.0
DOCTOR_EVERY = 2.0
FEED_EVERY = 0.1
DEFAULT_WARNING = timedelta(seconds=60)
DEAD_TUPLES = f"SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = '{raw_sql.TABLE}'::regclass"
HOLD = "SELECT count(*) FROM pg_class"  # any query: REPEATABLE READ keeps its snapshot until the end


def run(db: Database, size: Size, log, *, drain_rate: float | None = None) -> dict:
    rate = drain_rate or drain_once(db, size.horizon_calibration_jobs, PROCESSES, CONCURRENCY, log=log)["jobs_per_s"]
    feed = rate / 2
    warning = min(DEFAULT_WARNING, timedelta(seconds=size.horizon_seconds / 10))
    out = {"drain_rate": rate, "feed_per_s": feed, "seconds": size.horizon_seconds,
           "horizon_warning_s": warning.total_seconds()}
    for held in (False, True):
        name = "held" if held else "free"
        out[name] = _once(db, size.horizon_seconds, feed, held=held, warning=warning)
        log(f"horizon {name}: {out[name]['completed'] / size.horizon_seconds:,.0f} jobs/s completed "
            f"(fed {feed:,.0f}/s), claim p50 {median(out[name]['claim_ms']):.2f} ms, "
            f"dead tuples at the end {out[name]['dead_tuples'][-1]:,}")
    out["throughput_ratio"] = out["held"]["completed"] / out["free"]["completed"] if out["free"]["completed"] else None
    out["latency_doubled_s"] = doubled_at(out["held"]["claim_ms"], PROBE_EVERY)
    return out


def doubled_at(latencies: list[float], every: float, window: int = 5) -> float | None:
    """Seconds into the run when the claim's latency, as a rolling median of `window` samples
    (one slow probe is noise, not a trend), first reached twice its median over the first 10 %
    of the samples (at least 3); None if it never did."""
    head = latencies[:max(3, len(latencies) // 10)]
    if len(latencies) < window or not head:
        return None
    baseline = median(head)
    for end in range(window, len(latencies) + 1):
        if median(latencies[end - window:end]) >= 2 * baseline:
            return (end - 1) * every
    return None


def _once(db: Database, seconds: float, feed: float, *, held: bool, warning: timedelta) -> dict:
    tables.reset(db)
    counters = [CTX.RawValue("q", 0) for _ in range(PROCESSES)]
    series: dict = {"completed_per_s": [], "claim_ms": [], "dead_tuples": [], "warned_at_s": None}
    holder = _Holder(db) if held else None

    def watch(sync):
        stop = threading.Event()
        helpers = [threading.Thread(target=_feed, args=(db, feed, stop), daemon=True),
                   threading.Thread(target=_probe, args=(db, series, stop), daemon=True)]
        if held:
            helpers.append(threading.Thread(target=_doctor, args=(db, warning, series, stop), daemon=True))
        start, last = time.monotonic(), 0
        for thread in helpers:
            thread.start()
        while (elapsed := time.monotonic() - start) < seconds:
            time.sleep(max(0.0, 1.0 - (elapsed % 1.0)))
            done = sum(c.value for c in counters)
            series["completed_per_s"].append(done - last)
            last = done
        stop.set()
        for thread in helpers:
            thread.join(timeout=30)
        sync["stop"].set()

    if holder is not None:
        holder.start()
    try:
        run_workers(db.url, processes=PROCESSES, mode="run", counters=counters, while_running=watch,
                    options={"concurrency": CONCURRENCY})
    finally:
        if holder is not None:
            holder.stop()
    series["completed"] = sum(series["completed_per_s"])
    return series


class _Holder:
    """A session holding a snapshot, and with it the vacuum horizon, until `stop`."""

    def __init__(self, db: Database) -> None:
        self.conn = db.connect()

    def start(self) -> None:
        self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        self.conn.execute(HOLD)

    def stop(self) -> None:
        self.conn.rollback()
        self.conn.close()


def _feed(db: Database, per_s: float, stop: threading.Event) -> None:
    """Enqueue at `per_s`, a batch every FEED_EVERY seconds, carrying the fraction over: jobs
    due when enqueued, as a stream of enqueues writes them (section 6's feed). Until 2026-12-05
    this wrote a backlog's rows, due over the past hour, so each batch landed all over the
    claim order instead of at its end."""
    owed = 0.0
    with db.connect(autocommit=True) as conn:
        while not stop.wait(FEED_EVERY):
            owed += per_s * FEED_EVERY
            batch, owed = int(owed), owed - int(owed)
            if batch:
                conn.execute(raw_sql.FEED_PENDING, {"queue": raw_sql.QUEUE, "task": raw_sql.TASK, "n": batch})


def _probe(db: Database, series: dict, stop: threading.Event) -> None:
    params = {"queue": raw_sql.QUEUE, "batch": 1, "worker": "horizon-probe", "token": "probe"}
    with db.connect() as conn:
        while not stop.wait(PROBE_EVERY):
            began = time.perf_counter()
            conn.execute(raw_sql.CLAIM, params)
            series["claim_ms"].append((time.perf_counter() - began) * 1000)
            conn.rollback()
            series["dead_tuples"].append(conn.execute(DEAD_TUPLES).fetchone()[0])
            conn.rollback()


def _doctor(db: Database, warning: timedelta, series: dict, stop: threading.Event) -> None:
    """When `doctor`'s vacuum horizon check first stopped saying OK, in seconds into the run."""
    from sqla_queue import Queue
    from sqla_queue.ops.doctor import Doctor, Verdict

    queue = Queue(db.sqlalchemy_url, load_entrypoints=False)
    doctor = Doctor(queue, horizon_warning=warning, max_transaction_age=timedelta(hours=1))
    start = time.monotonic()
    try:
        while not stop.wait(DOCTOR_EVERY):
            with queue.engine.connect() as conn:
                verdict = doctor.check_vacuum_horizon(conn).verdict
            if verdict is not Verdict.OK:
                series["warned_at_s"] = time.monotonic() - start
                return
    finally:
        queue.engine.dispose()


def rows(results: dict) -> list[dict]:
    """The section's targets: ``target``, ``measured``, ``met`` (None: not measured)."""
    found = results.get("horizon")
    if not found:
        return []
    ratio, warned, doubled = found["throughput_ratio"], found["held"]["warned_at_s"], found["latency_doubled_s"]
    return [
        {"target": "held horizon: throughput >= 80 % of the same run without the holder",
         "measured": "no completions without the holder" if ratio is None else
                     f"{found['held']['completed']:,} vs {found['free']['completed']:,} jobs ({ratio:.0%})",
         "met": None if ratio is None else ratio >= 0.8},
        {"target": "doctor warns (naming the holder) before the claim's latency has doubled",
         "measured": f"warned at {_seconds(warned)}, claim latency doubled at {_seconds(doubled)}",
         "met": warned is not None and (doubled is None or warned <= doubled)},
    ]


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.0f} s"
