"""Section 5, claim cost against backlog: the same claim with a small and a large pending
backlog, both beside the same large completed history.

Per call, one client: sqla_queue's ``queue.claim(limit=1)`` (then ``complete``, untimed), and
the reference claim through psycopg (prepared; then its completion, untimed). Plus the buffers one
claim touches (EXPLAIN ANALYZE, BUFFERS, rolled back). The table is built once: history and the
small backlog, measured; then the rest of the large backlog added, vacuumed, measured again.
"""

from __future__ import annotations

import json
import time

from . import raw_sql, tables
from .bench_app import make_queue
from .server import Database
from .sizes import Size
from .stats import percentile, summary


def run(db: Database, size: Size, log) -> dict:
    tables.reset(db, completed=size.claim_history, pending=size.claim_small_backlog)
    small = _measure(db, size, log, size.claim_small_backlog)
    with db.connect(autocommit=True) as conn:
        tables.fill(conn, pending=size.claim_large_backlog - size.claim_small_backlog)
        tables.settle(conn)
    large = _measure(db, size, log, size.claim_large_backlog)
    return {"history": size.claim_history, "small": small, "large": large}


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


def _ours(queue, samples: int) -> float:
    """Median microseconds per ``queue.claim(limit=1)`` call."""
    times = []
    for _ in range(samples + 5):
        t0 = time.perf_counter()
        jobs = queue.claim(raw_sql.QUEUE, worker_id="claim-cost", limit=1)
        times.append(time.perf_counter() - t0)
        for job in jobs:
            queue.complete(job.id, job.claim_token)
    return percentile(times[5:], 50) * 1e6


def _raw(db: Database, samples: int) -> float:
    times = []
    with db.connect(autocommit=True) as conn:
        for n in range(samples + 5):
            token = f"raw-cost-{n}"
            params = {"queue": raw_sql.QUEUE, "worker": "raw-cost", "token": token}
            t0 = time.perf_counter()
            rows = conn.execute(raw_sql.inline_batch(raw_sql.CLAIM, 1), params, prepare=True).fetchall()
            times.append(time.perf_counter() - t0)
            conn.execute(raw_sql.COMPLETE, {"ids": [r[0] for r in rows], "token": token}, prepare=True)
    return percentile(times[5:], 50) * 1e6


def _claim_buffers(db: Database) -> int:
    """Shared buffers (hit + read) one batch-1 claim touches, from EXPLAIN; rolled back."""
    with db.connect() as conn:
        params = {"queue": raw_sql.QUEUE, "batch": 1, "worker": "explain", "token": "explain"}
        plan = conn.execute(raw_sql.EXPLAIN_CLAIM, params).fetchone()[0]
        conn.rollback()
    if isinstance(plan, str):
        plan = json.loads(plan)
    top = plan[0]["Plan"]
    return int(top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0))
