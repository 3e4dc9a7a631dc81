"""The ``sqla-queue`` command pauses Python's cyclic garbage collector while it imports (the
package, then the command's own module: psycopg and the worker's modules with ``worker``) and
freezes what the imports made (`sqla_queue._startup`): the imports end some 40 ms sooner. The
application's module is imported with the collector on. Any other process that imports
sqla_queue keeps its collector as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sqla_queue._startup import started_as_the_command_line

# The app records the collector's state when the command imports it: after the package's
# imports, before the worker's own freeze (`cli.worker._settle_collector`).
APP = """
import gc, json, os, sys
import sqla_queue as sq

with open(os.environ["GC_STATE_OUT"], "w") as out:
    json.dump({"enabled": gc.isenabled(), "frozen": gc.get_freeze_count(), "psycopg": "psycopg" in sys.modules,
               "worker": "sqla_queue.worker.worker" in sys.modules}, out)

queue = sq.Queue(os.environ["APP_URL"], load_entrypoints=False)


@queue.task
def noop(payload, ctx):
    return None
"""

PLAIN_IMPORT = """
import gc, json
import sqla_queue, sqla_queue.cli
print(json.dumps({"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}))
"""

FROZEN_BY_THE_IMPORTS = 20_000
"""Fewer objects than SQLAlchemy's import alone leaves (some 65,000 in all)."""


def _console_script() -> str:
    script = Path(sys.executable).parent / "sqla-queue"
    if not script.exists():
        pytest.fail(f"no console script beside {sys.executable}: pip install -e . puts it there")
    return str(script)


@pytest.mark.parametrize("command", ["console script", "python -m"])
def test_the_command_imports_with_the_collector_paused_and_freezes_what_it_imported(
        command, tmp_path, database_url, clean_jobs):
    (tmp_path / "app.py").write_text(APP)
    out = tmp_path / "gc.json"
    env = {**os.environ, "APP_URL": database_url, "GC_STATE_OUT": str(out), "SQLA_QUEUE_DISABLE_PLUGIN_AUTOLOAD": "1"}
    start = [_console_script()] if command == "console script" else [sys.executable, "-m", "sqla_queue.cli"]
    done = subprocess.run([*start, "--app", "app:queue", "worker", "--until-empty"], check=False, cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr[-3000:]
    state = json.loads(out.read_text())
    assert state["enabled"], "the collector was left off while the application's module was imported"
    assert state["frozen"] > FROZEN_BY_THE_IMPORTS, state
    # The worker command brought psycopg and the worker's modules in with the collector paused,
    # before the app's module (whose engine would otherwise have imported psycopg).
    assert state["psycopg"] and state["worker"], state


def test_an_application_that_imports_sqla_queue_keeps_its_collector(tmp_path):
    done = subprocess.run([sys.executable, "-c", PLAIN_IMPORT], check=False, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)

    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == {"enabled": True, "frozen": 0}


@pytest.mark.parametrize(("argv", "orig_argv", "expected"), [
    (["/venv/bin/sqla-queue", "worker"], ["/venv/bin/python", "/venv/bin/sqla-queue", "worker"], True),
    ([r"C:\venv\Scripts\sqla-queue.exe", "worker"], [r"C:\venv\Scripts\sqla-queue.exe", "worker"], True),
    (["-m", "worker"], ["python", "-X", "importtime", "-m", "sqla_queue.cli", "worker"], True),
    (["-m"], ["python", "-m", "myapp.cli"], False),
    (["-m"], ["python", "-m"], False),
    (["manage.py", "runserver"], ["python", "manage.py", "runserver"], False),
    (["-c"], ["python", "-c", "import sqla_queue"], False),
    ([], [], False),
])
def test_only_the_commands_own_entry_points_count_as_the_command_line(argv, orig_argv, expected):
    assert started_as_the_command_line(argv, orig_argv) is expected
