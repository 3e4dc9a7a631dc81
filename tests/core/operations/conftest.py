"""Setup for the operations tests: stats signals, doctor checks, retention, operator actions.

Most tests share the session's migrated database through ``ops_queue`` (job and counter tables
emptied first). Anything that holds sessions, locks or snapshots open, or needs a large table,
asks for a database of its own (``own_database``), so it never disturbs another test's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

import sqla_queue as sq

SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))
COUNTERS = "sqla_queue_jobs_counters"
SAMPLES = "sqla_queue_jobs_samples"

APP = textwrap.dedent(
    """
    import os
    import sqla_queue as sq

    queue = sq.Queue(os.environ["APP_DATABASE_URL"], load_entrypoints=False)

    @queue.task
    def send_email(payload, ctx):
        pass

    @queue.task(queue="images", max_attempts=2)
    def resize(payload, ctx):
        pass
    """
)


def register_tasks(queue: sq.Queue) -> sq.Queue:
    queue.task(lambda payload, ctx: None, name="send_email")
    queue.task(lambda payload, ctx: None, name="resize", queue="images", max_attempts=2)
    return queue


@pytest.fixture
def ops_queue(engine: Engine, clean_jobs: None) -> sq.Queue:
    """A fresh Queue (its own empty-claim throttle) on empty job, counter and sample tables."""
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {COUNTERS}, {SAMPLES}"))
    return register_tasks(sq.Queue(engine, load_entrypoints=False))


@pytest.fixture
def run_sql(engine: Engine):
    """One statement in its own committed transaction (moving timestamps instead of sleeping)."""

    def run(sql: str, **params: Any) -> list[Any]:
        with engine.begin() as conn:
            result = conn.execute(text(sql), params)
            return result.all() if result.returns_rows else []

    return run


@pytest.fixture
def counters(engine: Engine):
    """Counter totals by (queue, kind), read straight from the table."""

    def read() -> dict[tuple[str, str], int]:
        with engine.connect() as conn:
            rows = conn.execute(text(f"SELECT queue_name, kind, sum(events) FROM {COUNTERS} GROUP BY 1, 2"))
            return {(q, k): int(n) for q, k, n in rows}

    return read


@pytest.fixture
def cli(tmp_path: Path, database_url: str):
    """Run sqla-queue with the app module `opsapp` on the session's database (or another)."""
    (tmp_path / "opsapp.py").write_text(APP)

    def run(*args: str, app: str | None = "opsapp:queue", url: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
        env["APP_DATABASE_URL"] = url or database_url
        argv = [SCRIPT, *(["--app", app] if app else []), *args]
        return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)

    return run
