"""Section 5, claim cost against backlog: the same claim with a small and a large pending
backlog, both beside the same large completed history; then the large backlog with priorities in
use beside one without.

Per call, one client: sqla_queue's ``queue.claim(limit=1)`` (then ``complete``, untimed), and
the reference claim through psycopg (prepared; then its completion, untimed). Plus the buffers one
claim touches (EXPLAIN ANALYZE, BUFFERS, rolled back). The table is built once: history and the
small backlog, measured; then the rest of the large backlog added, vacuumed, measured again.
Last, a second queue with as large a backlog at priorities -1, 0 and 5 (in turn) is added and
vacuumed, and the two queues are measured in alternation, in the same table and the same minutes,
so the ratio between them is the cost of priorities in use and nothing else.
"""

from __future__ import annotations

import json
import time

from . import raw_sql, tables
from .bench_app import make_queue
from .server import Database
from .sizes import Size
from .stats import percentile, ratio, summary
from .targets import CLAIM_PRIORITIES as PRIORITIES

PRIORITY_QUEUE = "bench-priorities"


def run(db: Database, size: Size, log) -> dict:
    tables.reset(db, completed=size.claim_history, pending=size.claim_small_backlog)
    small = _measure(db, size, log, size.claim_small_backlog)
    with db.connect(autocommit=True) as conn:
        tables.fill(conn, pending=size.claim_large_backlog - size.claim_small_backlog)
        tables.settle(conn)
    large = _measure(db, size, log, size.claim_large_backlog)
    with db.connect(autocommit=True) as conn:
        tables.fill_priorities(conn, queue=PRIORITY_QUEUE, pending=size.claim_large_backlog, priorities=PRIORITIES)
        tables.settle(conn)
    priorities = _measure_priorities(db, size, log, size.claim_large_backlog)
    return {"history": size.claim_history, "small": small, "large": large, "priorities": priorities}


def _measure(db: Database, size: Size, log, backlog: int) -> dict:
    queue = make_queue(db.sqlalchemy_url)
    ours, raw = [], []
    try:
        buffers = _claim_buffers(db)
        for rep in range(size.repeat):
            ours.append(_ours(queue, size.claim_samples))
            raw.append(_raw(db, size.claim_samples))
            log(f"claim cost at {backlog:,} pending rep {rep + 1}: sqla_queue {ours[-1]:.0f} us, "
                f"raw {raw[-1]:.0f} us, {buffers} buffers")
    finally:
        queue.engine.dispose()
    return {"backlog": backlog, "ours_us": summary(ours), "raw_us": summary(raw), "buffers": buffers}


def _measure_priorities(db: Database, size: Size, log, backlog: int) -> dict:
    """Both queues' claims, alternating which goes first in each repetition: ``plain`` (all at
    the default priority) and ``mixed`` (`PRIORITIES` in turn), and the ratio mixed / plain of
    each repetition."""
    queue = make_queue(db.sqlalchemy_url)
    names = {"plain": raw_sql.QUEUE, "mixed": PRIORITY_QUEUE}
    out = {key: {"ours": [], "raw": [], "buffers": _claim_buffers(db, name)} for key, name in names.items()}
    try:
        for rep in range(size.repeat):
            for key in (("plain", "mixed") if rep % 2 == 0 else ("mixed", "plain")):
                out[key]["ours"].append(_ours(queue, size.claim_samples, names[key]))
                out[key]["raw"].append(_raw(db, size.claim_samples, names[key]))
            log(f"claim cost at {backlog:,} pending rep {rep + 1}: priorities {PRIORITIES} in use "
                f"{out['mixed']['ours'][-1]:.0f} us (raw {out['mixed']['raw'][-1]:.0f}), one priority "
                f"{out['plain']['ours'][-1]:.0f} us (raw {out['plain']['raw'][-1]:.0f})")
    finally:
        queue.engine.dispose()
    pairs = list(zip(out["mixed"]["ours"], out["plain"]["ours"]))
    raw_pairs = list(zip(out["mixed"]["raw"], out["plain"]["raw"]))
    return {
        "backlog": backlog, "priorities": list(PRIORITIES),
        **{key: {"ours_us": summary(v["ours"]), "raw_us": summary(v["raw"]), "buffers": v["buffers"]}
           for key, v in out.items()},
        "ratio": summary(ratio(m, p) for m, p in pairs),
        "raw_ratio": summary(ratio(m, p) for m, p in raw_pairs),
    }


def _ours(queue, samples: int, queue_name: str = raw_sql.QUEUE) -> float:
    """Median microseconds per ``queue.claim(limit=1)`` call."""
    times = []
    for _ in range(samples + 5):
        t0 = time.perf_counter()
        jobs = queue.claim(queue_name, worker_id="claim-cost", limit=1)
        times.append(time.perf_counter() - t0)
        for job in jobs:
            queue.complete(job.id, job.claim_token)
    return percentile(times[5:], 50) * 1e6


def _raw(db: Database, samples: int, queue_name: str = raw_sql.QUEUE) -> float:
    times = []
    with db.connect(autocommit=True) as conn:
        for n in range(samples + 5):
            token = f"raw-cost-{queue_name}-{n}"
            params = {"queue": queue_name, "worker": "raw-cost", "token": token}
            t0 = time.perf_counter()
            rows = conn.execute(raw_sql.inline_batch(raw_sql.CLAIM, 1), params, prepare=True).fetchall()
            times.append(time.perf_counter() - t0)
            conn.execute(raw_sql.COMPLETE, {"ids": [r[0] for r in rows], "token": token}, prepare=True)
    return percentile(times[5:], 50) * 1e6


def _claim_buffers(db: Database, queue_name: str = raw_sql.QUEUE) -> int:
    """Shared buffers (hit + read) one batch-1 claim touches, from EXPLAIN; rolled back."""
    with db.connect() as conn:
        params = {"queue": queue_name, "batch": 1, "worker": "explain", "token": "explain"}
        plan = conn.execute(raw_sql.EXPLAIN_CLAIM, params).fetchone()[0]
        conn.rollback()
    if isinstance(plan, str):
        plan = json.loads(plan)
    top = plan[0]["Plan"]
    return int(top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0))
