"""`sqla-queue worker` imports only what a worker uses: the commands it does not run (Alembic
behind `db` and `alembic`, Rich behind the commands that print tables, the doctor's checks) stay
unloaded, which is most of a worker's start-up time otherwise; so do SQLAlchemy's ORM and its
asyncio extension, which a worker never uses (the job table is Core: `sqla_queue.tables`), and
an application that only enqueues loads neither those nor click."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# Module names as loaded: ours and SQLAlchemy's in full, any other by its top-level package.
LOADED = """
loaded = sorted({name if name.startswith(("sqla_queue", "sqlalchemy.")) else name.split(".")[0]
                 for name in sys.modules})
print(json.dumps(loaded))
"""

PROBE = """
import json, sys
sys.argv = ["sqla-queue", "--app", "app:queue", "worker", "--until-empty"]
import app
app.queue.enqueue(app.noop, {})
from sqla_queue.cli import run
try:
    run()
except SystemExit as exc:
    assert not exc.code, exc.code
""" + LOADED

ENQUEUE_ONLY = """
import json, sys
import app
app.queue.enqueue(app.noop, {})
app.queue.enqueue_many([{"task": app.noop, "payload": {"i": i}} for i in range(3)])
""" + LOADED

NEVER_ON_THE_WORKER_PATH = {"sqlalchemy.orm", "sqlalchemy.ext.asyncio", "sqla_queue.models"}

APP = """
import os
import sqla_queue as sq

queue = sq.Queue(os.environ["APP_URL"], load_entrypoints=False)


@queue.task
def noop(payload, ctx):
    return None
"""


def _loaded_by(probe: str, tmp_path, database_url: str) -> set[str]:
    (tmp_path / "app.py").write_text(APP)
    env = {**os.environ, "APP_URL": database_url, "SQLA_QUEUE_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_worker_run_never_imports_the_other_commands(tmp_path, database_url, clean_jobs, count_jobs):
    loaded = _loaded_by(PROBE, tmp_path, database_url)

    assert "sqla_queue.worker.worker" in loaded and "sqla_queue.cli.worker" in loaded  # it did run
    assert count_jobs("status = 'completed'") == 1  # and ran the job it enqueued
    unused = {"alembic", "mako", "rich", "sqla_queue.migrations", "sqla_queue.cli.alembic_cmd",
              "sqla_queue.cli.db", "sqla_queue.cli.stats", "sqla_queue.cli.jobs", "sqla_queue.ops.doctor"}
    assert loaded & unused == set()


def test_a_worker_run_never_imports_the_orm(tmp_path, database_url, clean_jobs, count_jobs):
    loaded = _loaded_by(PROBE, tmp_path, database_url)

    assert count_jobs("status = 'completed'") == 1
    assert "sqlalchemy.engine" in loaded  # the names are SQLAlchemy's modules in full
    assert loaded & NEVER_ON_THE_WORKER_PATH == set()


def test_an_application_that_enqueues_imports_neither_the_orm_nor_the_cli(tmp_path, database_url, clean_jobs,
                                                                          count_jobs):
    loaded = _loaded_by(ENQUEUE_ONLY, tmp_path, database_url)

    assert count_jobs() == 4
    assert loaded & (NEVER_ON_THE_WORKER_PATH | {"click", "sqla_queue.cli", "sqla_queue.worker"}) == set()


STARTUP = """
import json, sys
import app
import sqla_queue.cli.worker, sqla_queue.worker.worker
""" + LOADED


def test_event_payloads_and_report_types_are_no_part_of_a_workers_start_up(tmp_path, database_url):
    """Eighteen frozen dataclasses (some 11 ms): the events a worker first builds after its first
    round, the operator reads' types it never builds."""
    loaded = _loaded_by(STARTUP, tmp_path, database_url)

    assert "sqla_queue.worker.worker" in loaded and "sqla_queue.hookspecs" in loaded
    assert {"sqla_queue.events", "sqla_queue.reports"} & loaded == set()
