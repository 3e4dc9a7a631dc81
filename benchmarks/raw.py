"""Section 1, the raw-SQL limit: the reference statements with no sqla_queue code in the way.

Claim + guarded completion at batch 1, 10 and 100 (and, after the drains, at the batch sizes the
workers actually used), through pgbench (``-M prepared``, one script run = one batch, 2 commits)
and through psycopg (``prepare=True``, autocommit, one process per connection); the enqueue
INSERT single-row and multi-row. Every run starts from a fresh, vacuumed table holding exactly
the jobs it will claim, and its rate counts the rows the database shows completed.
"""

from __future__ import annotations

import time

from . import pgbench, raw_sql, tables
from .procs import run_raw_clients
from .server import Database
from .sizes import Size, raw_jobs_for
from .stats import summary

CLAIM_BATCHES = (1, 10, 100)
ENQUEUE_ROWS = (1, 100, 1000)


def methods(db: Database) -> list[str]:
    return (["pgbench"] if db.pgbench else []) + ["psycopg"]


def claim_limit(db: Database, size: Size, batches, log, *, only: list[str] | None = None) -> dict:
    """``{method: {clients: {batch: summary of jobs/s}}}`` over `size.repeat` repetitions."""
    use = only or methods(db)
    values: dict = {m: {c: {b: [] for b in batches} for c in size.raw_clients} for m in use}
    for rep in range(size.repeat):
        for batch in batches:
            for clients in size.raw_clients:
                for method in use:
                    rate = claim_run(db, method, clients, batch, raw_jobs_for(size, batch))
                    values[method][clients][batch].append(rate)
                    log(f"raw claim+complete {method} c={clients} batch={batch} rep {rep + 1}: {rate:,.0f} jobs/s")
    return {m: {c: {b: summary(v) for b, v in per_c.items()} for c, per_c in per_m.items()}
            for m, per_m in values.items()}


def claim_run(db: Database, method: str, clients: int, batch: int, jobs: int) -> float:
    per_client = -(-jobs // (clients * batch))
    total = per_client * clients * batch
    tables.reset(db, pending=total)
    if method == "pgbench":
        script = raw_sql.inline_batch(raw_sql.PGBENCH_CLAIM_AND_COMPLETE, batch)
        out = pgbench.run(db, raw_sql.pgbench_script(script), clients=clients, transactions=per_client,
                          defines={"queue": raw_sql.QUEUE, "worker": "pgbench"})
        seconds = out["seconds"]
    else:
        out = run_raw_clients(db.url, clients=clients, batch=batch, jobs=total)
        seconds = out["seconds"]
    done = tables.completed(db)
    if done != total:  # every claim should find a full batch; say so if one did not
        print(f"WARNING: raw {method} c={clients} batch={batch} completed {done} of {total} jobs")
    return done / seconds


def enqueue_limit(db: Database, size: Size, log) -> dict:
    """``{method: {rows per statement: summary of jobs/s}}``, one client, one commit per statement."""
    use = methods(db)
    values: dict = {m: {r: [] for r in ENQUEUE_ROWS} for m in use}
    for rep in range(size.repeat):
        for rows in ENQUEUE_ROWS:
            for method in use:
                total = size.raw_enqueue_rows if rows > 1 else max(rows, size.raw_enqueue_rows // 5)
                rate = _enqueue_run(db, method, rows, total)
                values[method][rows].append(rate)
                log(f"raw enqueue {method} {rows}-row INSERT rep {rep + 1}: {rate:,.0f} jobs/s")
    return {m: {r: summary(v) for r, v in per_m.items()} for m, per_m in values.items()}


def _enqueue_run(db: Database, method: str, rows: int, total: int) -> float:
    statements = max(1, total // rows)
    tables.reset(db)
    if method == "pgbench":
        out = pgbench.run(db, raw_sql.pgbench_enqueue_script(rows), clients=1, transactions=statements,
                          defines={"queue": raw_sql.QUEUE, "task": raw_sql.TASK})
        seconds = out["seconds"]
    else:
        seconds = _psycopg_enqueue(db, rows, statements)
    inserted = sum(tables.counts(db).values())
    if inserted != rows * statements:
        print(f"WARNING: raw enqueue {method} inserted {inserted} of {rows * statements}")
    return inserted / seconds


def _psycopg_enqueue(db: Database, rows: int, statements: int) -> float:
    sql = raw_sql.ENQUEUE_ONE if rows == 1 else raw_sql.enqueue_rows(rows)
    base = {"queue": raw_sql.QUEUE, "task": raw_sql.TASK}
    params = []
    for s in range(statements):
        if rows == 1:
            params.append({**base, "payload": f'{{"i": {s}}}'})
        else:
            params.append({**base, **{f"p{i}": f'{{"i": {s * rows + i}}}' for i in range(rows)}})
    with db.connect(autocommit=True) as conn:
        conn.execute("SELECT 1", prepare=True)
        t0 = time.monotonic()
        for p in params:
            conn.execute(sql, p, prepare=True).fetchall()
        return time.monotonic() - t0
