"""Section 16, workflows (docs/how-to/workflows.md): fan-in and chains, side by side in one run.

* **fan-in**: one batch of `workflow_batch` no-op jobs and its callback (``queue.batch``, one
  call), drained by 2 worker processes x concurrency 10, against the same jobs enqueued by
  ``enqueue_many`` without a batch. Throughput: the batch's jobs over the span from the start
  signal to the last one's completion. The callback must run exactly once (one completed
  callback, one attempt), and start within 1 s of the batch's last completion (its
  ``locked_at`` against the jobs' latest ``completed_at``). Targets: that, and at least 85 % of
  the throughput without the batch.
* **chain**: `workflow_chain` steps (``queue.chain``) run by one worker process at concurrency 1,
  otherwise idle; per step, from the moment the previous step completed (when the step became
  pending, in the same statement) to its claim (``locked_at``). Target: p50 at most 5 ms.

Times are the database's (``clock_timestamp()`` in the statements that finish and claim).
"""

from __future__ import annotations

from itertools import pairwise

from . import raw_sql, tables
from .procs import run_workers
from .server import Database
from .stats import percentile, summary

TABLE = raw_sql.TABLE
BATCH_RESULT = f"""
SELECT count(*) FILTER (WHERE status = 'completed'), max(completed_at)
FROM {TABLE} WHERE id BETWEEN %(first)s AND %(last)s
"""
CALLBACK = f"SELECT status, attempts, locked_at FROM {TABLE} WHERE id = %(callback)s"
STEP_TIMES = f"SELECT id, locked_at, completed_at FROM {TABLE} WHERE id = ANY(%(ids)s)"


def run(db: Database, size, log) -> dict:
    out: dict = {"fan_in": {"batch": [], "plain": [], "callback_runs": [], "callback_lag": []}, "chain": []}
    for _rep in range(size.repeat):
        for variant in ("batch", "plain"):
            done = _fan_in(db, size.workflow_batch, batched=variant == "batch")
            out["fan_in"][variant].append(done["jobs_per_s"])
            if variant == "batch":
                out["fan_in"]["callback_runs"].append(done["callback_runs"])
                out["fan_in"]["callback_lag"].append(done["callback_lag"])
            log(f"workflows: {size.workflow_batch:,} jobs, {variant}: {done['jobs_per_s']:,.0f} jobs/s"
                + (f", callback ran {done['callback_runs']}x, {done['callback_lag'] * 1000:,.0f} ms after the last job"
                   if variant == "batch" else ""))
        waits = _chain(db, size.workflow_chain)
        out["chain"].extend(waits)
        log(f"workflows: chain of {size.workflow_chain:,} steps: p50 {percentile(waits, 50) * 1000:.2f} ms, "
            f"p99 {percentile(waits, 99) * 1000:.2f} ms from a step's completion to the next one's claim")
    return {
        "sizes": {"batch": size.workflow_batch, "chain": size.workflow_chain},
        "fan_in": {"batch": summary(out["fan_in"]["batch"]), "plain": summary(out["fan_in"]["plain"]),
                   "callback_runs": out["fan_in"]["callback_runs"],
                   "callback_lag": max(out["fan_in"]["callback_lag"])},
        "chain": {"p50": percentile(out["chain"], 50), "p99": percentile(out["chain"], 99), "steps": len(out["chain"])},
    }


def _fan_in(db: Database, jobs: int, *, batched: bool) -> dict:
    """One drain of `jobs` no-op jobs, in a batch with its callback or not. The jobs of one
    ``enqueue_many`` get ascending ids in input order, the callback last."""
    tables.reset(db)
    items = [{"task": raw_sql.TASK, "payload": {"i": i}} for i in range(jobs)]
    with tables.app_queue(db) as queue:
        if batched:
            callback = queue.batch(items, on_complete=(raw_sql.TASK, {}))
            first, last_id = callback - jobs, callback - 1
        else:
            ids = queue.enqueue_many(items)
            callback, first, last_id = None, ids[0], ids[-1]
    with db.connect(autocommit=True) as conn:
        tables.settle(conn)
    result = run_workers(db.url, processes=2, mode="drain", before_go=lambda: tables.db_clock(db),
                         options={"concurrency": 10})
    with db.connect() as conn:
        done, last = conn.execute(BATCH_RESULT, {"first": first, "last": last_id}).fetchone()
        runs = lag = None
        if callback is not None:
            status, attempts, started = conn.execute(CALLBACK, {"callback": callback}).fetchone()
            runs = attempts if status == "completed" else 0
            lag = (started - last).total_seconds() if started is not None else float("inf")
    return {"jobs_per_s": done / (last - result["started"]).total_seconds(), "callback_runs": runs,
            "callback_lag": lag}


def _chain(db: Database, steps: int) -> list[float]:
    """Seconds from each step's completion to the next step's claim."""
    tables.reset(db)
    with tables.app_queue(db) as queue:
        ids = queue.chain([(raw_sql.TASK, {"step": n}) for n in range(steps)])
    run_workers(db.url, processes=1, mode="drain", options={"concurrency": 1})
    with db.connect() as conn:
        times = {row[0]: (row[1], row[2]) for row in conn.execute(STEP_TIMES, {"ids": ids}).fetchall()}
    return [(times[after][0] - times[before][1]).total_seconds() for before, after in pairwise(ids)]


def rows(results: dict) -> list[dict]:
    """The section's three targets: ``target``, ``measured``, ``met``."""
    found = results.get("workflows")
    if not found:
        return []
    fan_in, chain, n = found["fan_in"], found["chain"], found["sizes"]
    ratio = fan_in["batch"]["median"] / fan_in["plain"]["median"]
    runs, lag = fan_in["callback_runs"], fan_in["callback_lag"]
    return [
        {"target": f"fan-in: a batch of {n['batch']:,} jobs runs its callback exactly once, within 1 s of its last job",
         "measured": f"ran {', '.join(f'{r}x' for r in runs)}; at most {lag * 1000:,.0f} ms after the last job",
         "met": all(r == 1 for r in runs) and lag <= 1.0},
        {"target": "fan-in: the batch drains at >= 85 % of the same jobs without a batch, 2 x 10",
         "measured": f"{fan_in['batch']['median']:,.0f} vs {fan_in['plain']['median']:,.0f} jobs/s ({ratio:.0%})",
         "met": ratio >= 0.85},
        {"target": f"chain of {n['chain']:,} steps: p50 from a step's completion to the next one's start <= 5 ms",
         "measured": f"p50 {chain['p50'] * 1000:.2f} ms, p99 {chain['p99'] * 1000:.2f} ms over {chain['steps']:,} steps",
         "met": chain["p50"] <= 0.005},
    ]
