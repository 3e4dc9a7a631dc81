"""Where the time goes: the statements (each one a round trip) sqla_queue sends per job.

Run after every measured section, on a second embedded server started with pg_stat_statements
preloaded (so the measured server keeps PostgreSQL's default settings). Nothing here is timed:
it counts calls per statement, BEGIN/COMMIT and pings included, for a few small scenarios.
"""

from __future__ import annotations

import re

from . import tables
from .bench_app import make_queue
from .procs import run_workers
from .raw_sql import QUEUE, TASK
from .server import Database, diagnostic_database
from .sizes import Size

PRELOAD = {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track_utility": "on"}
STATEMENTS = """
SELECT query, calls FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY calls DESC
"""


def run(db: Database, size: Size, log) -> dict | None:
    if not db.embedded:
        return None  # needs a server of our own to preload pg_stat_statements
    jobs = max(200, min(size.drain_jobs, 2_000))
    out = {}
    with diagnostic_database(PRELOAD) as diag:
        with diag.connect(autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
        out["drain 1 proc x concurrency 10"] = _drain(diag, jobs, 10)
        out["drain 1 proc x concurrency 1"] = _drain(diag, jobs // 4, 1)
        out["enqueue (one per transaction)"] = _client(diag, jobs, lambda q: q.enqueue(TASK, {"i": 1}), 1)
        out["enqueue_many(100)"] = _client(
            diag, jobs // 100 or 1, lambda q: q.enqueue_many([{"task": TASK, "payload": {"i": i}} for i in range(100)]), 100)
        out["claim(limit=1) + complete, one client"] = _claim(diag, jobs // 4)
    for name, rows in out.items():
        log(f"statements per job, {name}: {sum(r['per_job'] for r in rows):.2f}")
    return out


def _reset_statements(db: Database) -> None:
    with db.connect(autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")


def _collect(db: Database, jobs: int) -> list[dict]:
    with db.connect(autocommit=True) as conn:
        rows = conn.execute(STATEMENTS).fetchall()
    out = []
    for query, calls in rows:
        text = re.sub(r"\s+", " ", query).strip()
        if "pg_stat_statements" in text:
            continue
        out.append({"statement": _label(text), "calls": calls, "per_job": calls / jobs})
    return out


def _label(text: str) -> str:
    """A short, recognisable name for a statement (its first words, CTE names kept)."""
    ctes = re.findall(r"(\w+) AS \(", text)
    head = text[:70] + ("..." if len(text) > 70 else "")
    return head + (f" [CTE {', '.join(ctes)}]" if ctes and len(text) > 70 else "")


def _drain(db: Database, jobs: int, concurrency: int) -> list[dict]:
    tables.reset(db, pending=jobs)
    run_workers(db.url, processes=1, mode="drain", options={"concurrency": concurrency},
                before_go=lambda: _reset_statements(db))
    return _collect(db, jobs)


def _client(db: Database, calls: int, call, jobs_per_call: int) -> list[dict]:
    tables.reset(db)
    queue = make_queue(db.sqlalchemy_url)
    try:
        call(queue)  # connect and compile before counting
        _reset_statements(db)
        for _ in range(calls):
            call(queue)
    finally:
        queue.engine.dispose()
    return _collect(db, calls * jobs_per_call)


def _claim(db: Database, claims: int) -> list[dict]:
    tables.reset(db, pending=claims + 10)
    queue = make_queue(db.sqlalchemy_url)
    try:
        for job in queue.claim(QUEUE, worker_id="diag", limit=1):
            queue.complete(job.id, job.claim_token)
        _reset_statements(db)
        for _ in range(claims):
            for job in queue.claim(QUEUE, worker_id="diag", limit=1):
                queue.complete(job.id, job.claim_token)
    finally:
        queue.engine.dispose()
    return _collect(db, claims)
