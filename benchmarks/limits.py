"""Section 13, limits (docs/how-to/limits.md): the four flow-control targets, side by side in one run.

* **fair tenant**: tenant B's jobs enqueued (at the start signal) behind tenant A's backlog, the
  queue `fair=True`; B's p99 from enqueue to handler start (stamped by the handlers, like the
  rate's starts), against B's p99 when it runs alone. Target: at most 2x.
* **fair drain**: the same jobs spread over `limits_keys` group keys drained with `fair=True`
  and with no limits at all. Target: fair at least 90 % of unlimited.
* **serial keys**: `group_concurrency=1` over `limits_serial_keys` keys and `fleet_processes`
  worker processes, against the same drain with no limits; afterwards, per key, no job claimed
  before the previous one of its key completed. Target: 0 overlaps and at least 80 % of unlimited.
* **rate**: `rate=500/s` over 4 worker processes for `limits_rate_seconds`: handler starts per
  second (stamped by the handlers, on one clock for every process), every full second after the
  first. Target: each within 1 % of 500.

Claim times are ``locked_at``, which a lease renewal moves on; these jobs are no-ops, finished
long before a renewal. Each drain's rate is section 3's: jobs over the span from the database
clock at the start signal to the last ``completed_at``.
"""

from __future__ import annotations

import time

from . import raw_sql, tables
from .procs import run_workers
from .server import Database
from .sizes import Size
from .stats import percentile, summary

TABLE = raw_sql.TABLE
LIMITS = f"{TABLE}_limits"
RATE = 500
FILL_KEYED = f"""
INSERT INTO {TABLE} (queue_name, task, payload, run_at, group_key)
SELECT %(queue)s, %(task)s, jsonb_build_object('i', g),
       now() - interval '1 hour' + (g * interval '1 hour') / %(n)s, %(prefix)s || (g %% %(keys)s)
FROM generate_series(1, %(n)s) AS g
"""
OVERLAPS = f"""
SELECT count(*) FROM (
  SELECT locked_at, lag(completed_at) OVER (PARTITION BY group_key ORDER BY locked_at) AS previous_end
  FROM {TABLE} WHERE status = 'completed'
) runs WHERE locked_at < previous_end
"""

def run(db: Database, size: Size, log) -> dict:
    """The section's figures. It leaves the benchmark queue without limits, even when it fails:
    the sections after it (the held horizon, the peers) drain the same queue, and a leftover
    ``rate=500/s`` would cap them at 500 jobs/s."""
    try:
        return _measured(db, size, log)
    finally:
        _reset(db, None)


def _measured(db: Database, size: Size, log) -> dict:
    out: dict = {"fair_tenant": {"alone": [], "behind": []}, "fair_drain": {"fair": [], "unlimited": []},
                 "serial_keys": {"serial": [], "unlimited": [], "overlaps": []}, "rate": {"per_second": []}}
    for rep in range(size.repeat):
        for variant in ("alone", "behind"):
            p99 = _tenant(db, size, backlog=size.limits_backlog if variant == "behind" else 0)
            out["fair_tenant"][variant].append(p99)
            log(f"limits: tenant B ({size.limits_small_tenant} jobs) {variant}, fair: p99 {p99 * 1000:,.0f} ms")
        for variant, limits in (("fair", {"fair": True}), ("unlimited", None)):
            rate = _drain(db, size.drain_jobs, size.limits_keys, 2, 10, limits)["jobs_per_s"]
            out["fair_drain"][variant].append(rate)
            log(f"limits: drain over {size.limits_keys} keys, {variant}: {rate:,.0f} jobs/s")
        for variant, limits in (("serial", {"group_concurrency": 1}), ("unlimited", None)):
            done = _drain(db, size.drain_jobs, size.limits_serial_keys, size.fleet_processes, 2, limits)
            out["serial_keys"][variant].append(done["jobs_per_s"])
            if variant == "serial":
                out["serial_keys"]["overlaps"].append(done["overlaps"])
            log(f"limits: {size.fleet_processes} workers over {size.limits_serial_keys} keys, {variant}: "
                f"{done['jobs_per_s']:,.0f} jobs/s, {done['overlaps']} overlapping runs of one key")
        per_second = _rate(db, size)
        out["rate"]["per_second"].append(per_second)
        log(f"limits: rate {RATE}/s over 4 workers: starts per full second {per_second}")
    return _summarised(out, size)


def _summarised(out: dict, size: Size) -> dict:
    seconds = [n for run in out["rate"]["per_second"] for n in run]
    return {
        "sizes": {"backlog": size.limits_backlog, "tenant": size.limits_small_tenant, "keys": size.limits_keys,
                  "serial_keys": size.limits_serial_keys, "workers": size.fleet_processes,
                  "jobs": size.drain_jobs, "rate_seconds": size.limits_rate_seconds},
        "fair_tenant": {k: summary(v) for k, v in out["fair_tenant"].items()},
        "fair_drain": {k: summary(v) for k, v in out["fair_drain"].items()},
        "serial_keys": {"serial": summary(out["serial_keys"]["serial"]),
                        "unlimited": summary(out["serial_keys"]["unlimited"]),
                        "overlaps": sum(out["serial_keys"]["overlaps"])},
        "rate": {"rate": RATE, "seconds": seconds,
                 "worst_deviation": max((abs(n - RATE) / RATE for n in seconds), default=None)},
    }


def _reset(db: Database, limits: dict | None) -> None:
    tables.reset(db)
    with db.connect(autocommit=True) as conn:
        conn.execute(f"DELETE FROM {LIMITS}")
        conn.execute(f"DELETE FROM {TABLE}_group_rates")
    if limits:
        with tables.app_queue(db) as queue:
            queue.set_limits(raw_sql.QUEUE, **limits)


def _filled(db: Database, limits: dict | None, fill: dict) -> None:
    """An empty queue, `fill` inserted (FILL_KEYED), then `limits` set: the backlog is written
    by SQL for speed, and `set_limits` gives it what the enqueue would have (a fair queue's
    turns), as it does for a user's backlog when a queue becomes fair."""
    _reset(db, None)
    with db.connect(autocommit=True) as conn:
        conn.execute(FILL_KEYED, {"queue": raw_sql.QUEUE, "task": raw_sql.TASK, **fill})
    if limits:
        with tables.app_queue(db) as queue:
            queue.set_limits(raw_sql.QUEUE, **limits)
    with db.connect(autocommit=True) as conn:
        tables.settle(conn)


def _drain(db: Database, jobs: int, keys: int, processes: int, concurrency: int, limits: dict | None) -> dict:
    _filled(db, limits, {"n": jobs, "keys": keys, "prefix": "key-"})
    result = run_workers(db.url, processes=processes, mode="drain", before_go=lambda: tables.db_clock(db),
                         options={"concurrency": concurrency})
    with db.connect() as conn:
        done, last, _claims = conn.execute(raw_sql.DRAIN_RESULT).fetchone()
        overlaps = conn.execute(OVERLAPS).fetchone()[0]
    return {"jobs": done, "jobs_per_s": done / (last - result["started"]).total_seconds(), "overlaps": overlaps}


def _tenant(db: Database, size: Size, *, backlog: int) -> float:
    """B's p99 wait in seconds from its enqueue to its handler's start, with A's `backlog` ahead
    of it (0: alone). Each B job carries the enqueue's moment (``t0``) and its handler stamps
    its start, both on CLOCK_MONOTONIC, one clock for every process: a claim is not a start
    when the worker buffers what it claims (prefetch)."""
    _filled(db, {"fair": True}, {"n": backlog, "keys": 1, "prefix": "A-"})

    with tables.app_queue(db) as queue:
        def enqueue_b():
            t0 = time.monotonic()
            queue.enqueue_many([{"task": raw_sql.TASK, "payload": {"i": i, "t0": t0}, "queue": raw_sql.QUEUE,
                                 "group_key": "B"} for i in range(size.limits_small_tenant)])
            return t0  # as an application does: the enqueue gives B its turns

        done = run_workers(db.url, processes=2, mode="drain", before_go=enqueue_b, options={"concurrency": 10},
                           record_starts=True)
    waits = [started - t0 for worker in done["workers"] for t0, started in worker["starts"] if t0 is not None]
    return percentile(waits, 99)


def _rate(db: Database, size: Size) -> list[int]:
    """Handler starts in each full second after the first start (the last second is partial),
    read from the handlers themselves: every worker process stamps each start on one clock
    (CLOCK_MONOTONIC)."""
    _filled(db, {"rate": f"{RATE}/s"}, {"n": RATE * (size.limits_rate_seconds + 1), "keys": 1, "prefix": "r-"})
    done = run_workers(db.url, processes=4, mode="drain", options={"concurrency": 10}, record_starts=True)
    return starts_per_second([started for worker in done["workers"] for _t0, started in worker["starts"]])[1:-1]


def starts_per_second(starts: list[float]) -> list[int]:
    """How many of `starts` (seconds) fall in each whole second from the first one on."""
    if not starts:
        return []
    first = min(starts)
    counts = [0] * (int(max(starts) - first) + 1)
    for started in starts:
        counts[int(started - first)] += 1
    return counts


def rows(results: dict) -> list[dict]:
    """The section's four targets: ``target``, ``measured``, ``met`` (None: not measured)."""
    found = results.get("limits")
    if not found:
        return []
    tenant, drain, serial, rate = found["fair_tenant"], found["fair_drain"], found["serial_keys"], found["rate"]
    alone, behind = tenant["alone"]["median"], tenant["behind"]["median"]
    fair_ratio = drain["fair"]["median"] / drain["unlimited"]["median"]
    serial_ratio = serial["serial"]["median"] / serial["unlimited"]["median"]
    worst = rate["worst_deviation"]
    return [
        {"target": "fair: tenant B's p99 enqueue to start behind A's backlog <= 2x B alone",
         "measured": f"{behind * 1000:,.0f} ms vs {alone * 1000:,.0f} ms alone ({behind / alone:.2f}x)",
         "met": behind <= 2 * alone},
        {"target": "fair drain over many keys >= 90 % of the unlimited drain",
         "measured": f"{drain['fair']['median']:,.0f} vs {drain['unlimited']['median']:,.0f} jobs/s ({fair_ratio:.0%})",
         "met": fair_ratio >= 0.9},
        {"target": "group_concurrency=1: 0 overlapping runs of a key, >= 80 % of the unlimited drain",
         "measured": f"{serial['overlaps']} overlaps; {serial['serial']['median']:,.0f} vs "
                     f"{serial['unlimited']['median']:,.0f} jobs/s ({serial_ratio:.0%})",
         "met": serial["overlaps"] == 0 and serial_ratio >= 0.8},
        {"target": f"rate={rate['rate']}/s: every full second after the first within 1 % of {rate['rate']}",
         "measured": "no full second measured" if worst is None else
                     f"{min(rate['seconds'])}-{max(rate['seconds'])} starts/s, worst {worst:.1%} off",
         "met": None if worst is None else worst <= 0.01},
    ]
