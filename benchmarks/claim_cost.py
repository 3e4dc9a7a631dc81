"""Section 5, claim cost against backlog: the same claim with a small and a large pending
backlog, both beside the same large completed history; then a large backlog with priorities in
use beside one without.

Per call, one client: sqla_queue's ``queue.claim(limit=1)`` (then ``complete``, untimed), and
the reference claim through psycopg (prepared; then its completion, untimed). Plus the buffers one
claim touches (EXPLAIN ANALYZE, BUFFERS, rolled back). The table is built once: history and the
small backlog, measured; then the rest of the large backlog added, vacuumed, measured again.

Last, priorities: the table is emptied and filled again with the same history and two fresh
queues of the large backlog's size, their rows interleaved: one with every job at priority 0,
one with its jobs at priorities -1, 0 and 5 in turn. Vacuumed, then the claims on the two
queues alternate one by one, so both see the same table, the same index and the same moment of
a shared, noisy machine: their ratio is the cost of priorities in use and nothing else.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable

from . import raw_sql, tables
from .bench_app import make_queue
from .server import Database
from .sizes import Size
from .stats import percentile, ratio, summary
from .targets import CLAIM_PRIORITIES as PRIORITIES

ONE_PRIORITY_QUEUE = "bench-one-priority"
PRIORITY_QUEUE = "bench-priorities"
_WARM_UP = 5  # claims per run left out of its median
_tokens = itertools.count()


def run(db: Database, size: Size, log) -> dict:
    tables.reset(db, completed=size.claim_history, pending=size.claim_small_backlog)
    small = _measure(db, size, log, size.claim_small_backlog)
    with db.connect(autocommit=True) as conn:
        tables.fill(conn, pending=size.claim_large_backlog - size.claim_small_backlog)
        tables.settle(conn)
    large = _measure(db, size, log, size.claim_large_backlog)
    tables.reset(db, completed=size.claim_history)
    with db.connect(autocommit=True) as conn:
        tables.fill_priorities(conn, plain=ONE_PRIORITY_QUEUE, mixed=PRIORITY_QUEUE,
                               pending=size.claim_large_backlog, priorities=PRIORITIES)
        tables.settle(conn)
    priorities = _measure_priorities(db, size, log, size.claim_large_backlog)
    return {"history": size.claim_history, "small": small, "large": large, "priorities": priorities}


def _measure(db: Database, size: Size, log, backlog: int) -> dict:
    queue = make_queue(db.sqlalchemy_url)
    ours, raw = [], []
    try:
        buffers = _claim_buffers(db)
        with db.connect(autocommit=True) as conn:
            for rep in range(size.repeat):
                ours.append(_median_us([_ours(queue) for _ in range(size.claim_samples + _WARM_UP)]))
                raw.append(_median_us([_raw(conn) for _ in range(size.claim_samples + _WARM_UP)]))
                log(f"claim cost at {backlog:,} pending rep {rep + 1}: sqla_queue {ours[-1]:.0f} us, "
                    f"raw {raw[-1]:.0f} us, {buffers} buffers")
    finally:
        queue.engine.dispose()
    return {"backlog": backlog, "ours_us": summary(ours), "raw_us": summary(raw), "buffers": buffers}


def _measure_priorities(db: Database, size: Size, log, backlog: int) -> dict:
    """``plain`` (every job at priority 0) and ``mixed`` (`PRIORITIES` in turn), their claims
    alternating one by one, and the ratio mixed / plain of each repetition's medians."""
    queue = make_queue(db.sqlalchemy_url)
    names = {"plain": ONE_PRIORITY_QUEUE, "mixed": PRIORITY_QUEUE}
    out = {key: {"ours": [], "raw": [], "buffers": _claim_buffers(db, name)} for key, name in names.items()}
    try:
        with db.connect(autocommit=True) as conn:
            for rep in range(size.repeat):
                ours = _alternating(size.claim_samples, {k: (lambda n=n: _ours(queue, n)) for k, n in names.items()})
                raw = _alternating(size.claim_samples, {k: (lambda n=n: _raw(conn, n)) for k, n in names.items()})
                for key in names:
                    out[key]["ours"].append(ours[key])
                    out[key]["raw"].append(raw[key])
                log(f"claim cost at {backlog:,} pending rep {rep + 1}: priorities {PRIORITIES} in use "
                    f"{ours['mixed']:.0f} us (raw {raw['mixed']:.0f}), one priority {ours['plain']:.0f} us "
                    f"(raw {raw['plain']:.0f})")
    finally:
        queue.engine.dispose()
    return {
        "backlog": backlog, "priorities": list(PRIORITIES),
        **{key: {"ours_us": summary(v["ours"]), "raw_us": summary(v["raw"]), "buffers": v["buffers"]}
           for key, v in out.items()},
        "ratio": summary(ratio(m, p) for m, p in zip(out["mixed"]["ours"], out["plain"]["ours"])),
        "raw_ratio": summary(ratio(m, p) for m, p in zip(out["mixed"]["raw"], out["plain"]["raw"])),
    }


def _alternating(samples: int, claims: dict[str, Callable[[], float]]) -> dict[str, float]:
    """Median microseconds of each claim, the claims taking turns one call at a time (which
    goes first alternates too)."""
    times: dict[str, list[float]] = {key: [] for key in claims}
    keys = list(claims)
    for n in range(samples + _WARM_UP):
        for key in keys if n % 2 == 0 else reversed(keys):
            times[key].append(claims[key]())
    return {key: _median_us(t) for key, t in times.items()}


def _median_us(seconds: list[float]) -> float:
    return percentile(seconds[_WARM_UP:], 50) * 1e6


def _ours(queue, queue_name: str = raw_sql.QUEUE) -> float:
    """Seconds one ``queue.claim(limit=1)`` call took (its completion untimed)."""
    t0 = time.perf_counter()
    jobs = queue.claim(queue_name, worker_id="claim-cost", limit=1)
    took = time.perf_counter() - t0
    for job in jobs:
        queue.complete(job.id, job.claim_token)
    return took


def _raw(conn, queue_name: str = raw_sql.QUEUE) -> float:
    """Seconds one reference claim took (prepared, autocommit; its completion untimed)."""
    token = f"raw-cost-{next(_tokens)}"
    params = {"queue": queue_name, "worker": "raw-cost", "token": token}
    t0 = time.perf_counter()
    rows = conn.execute(raw_sql.inline_batch(raw_sql.CLAIM, 1), params, prepare=True).fetchall()
    took = time.perf_counter() - t0
    conn.execute(raw_sql.COMPLETE, {"ids": [r[0] for r in rows], "token": token}, prepare=True)
    return took


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
