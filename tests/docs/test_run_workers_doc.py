"""docs/how-to/run-workers.md, run as written: its app module and each of its commands."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import doc_blocks

DOC = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "run-workers.md"
SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))


def blocks(kind: str) -> list[str]:
    return doc_blocks.blocks(DOC, kind)


def commands() -> list[str]:
    return doc_blocks.console_commands(DOC)


@pytest.fixture
def app_dir(tmp_path, database_url, queue):
    module = blocks("python")[0]  # the app module; the Logging section's block is tested in tests/cli
    package = tmp_path / "myapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text(module)
    return tmp_path


def run_env(database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env["SQLA_QUEUE_DATABASE_URL"] = database_url
    return env


def argv(command: str) -> list[str]:
    words = shlex.split(command)
    assert words[0] == "sqla-queue"
    return [SCRIPT, *words[1:]]


def test_the_doc_shows_these_worker_commands():
    assert commands() == [
        "sqla-queue --app myapp.jobs:queue worker --queues default,emails --concurrency 8",
        "sqla-queue --app myapp.jobs:queue worker --until-empty",
        "sqla-queue --app myapp.jobs:queue worker --queues default,emails --processes 2",
        "SQLA_QUEUE_STATEMENT_CACHE=off sqla-queue --app myapp.jobs:queue worker --queues emails",
        "sqla-queue --app myapp.jobs:queue worker --queues default,emails --log-format json",  # test_worker_logging.py
        "sqla-queue --app myapp.jobs:queue worker --queues default,emails --pgbouncer",  # worker/test_pgbouncer.py
    ]


def test_until_empty_command_drains_and_exits(app_dir, database_url, queue):
    """No --queues: the worker serves the queue the page's task is declared on, ``emails``,
    and says so."""
    job_id = queue.enqueue("send_email", {"to": "a@b.c"}, queue="emails")
    [command] = [c for c in commands() if "--until-empty" in c]
    assert "--queues" not in command
    result = subprocess.run(argv(command), cwd=app_dir, env=run_env(database_url),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert queue.get_job(job_id).status.value == "completed"
    assert "serving emails (every queue with a registered task)" in result.stderr
    assert "serving emails (every queue with a registered task)" in DOC.read_text().replace("\n", " ")


def run_then_sigterm(command: str, app_dir, database_url, queue, jobs: int,
                     env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Start the doc's long-running `command`, enqueue `jobs` jobs, wait until they have all
    completed, send SIGTERM; returns the exit code, stdout and stderr. A ``NAME=value`` before
    the command goes into its environment, as the shell would put it."""
    assignments = []
    while "=" in command.split(" ", 1)[0]:
        assignment, command = command.split(" ", 1)
        assignments.append(assignment.split("=", 1))
    process = subprocess.Popen(argv(command), cwd=app_dir, env={**(env or run_env(database_url)), **dict(assignments)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ids = [queue.enqueue("send_email", {"to": "a@b.c"}, queue="emails") for _ in range(jobs)]
        done = threading.Event()
        while not done.wait(0.05):
            if all(queue.get_job(i).status.value == "completed" for i in ids) or process.poll() is not None:
                done.set()
        assert [queue.get_job(i).status.value for i in ids] == ["completed"] * jobs
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, out, err


def test_long_running_command_works_then_stops_gracefully_on_sigterm(app_dir, database_url, queue):
    [command] = [c for c in commands() if "--concurrency" in c]
    code, out, err = run_then_sigterm(command, app_dir, database_url, queue, jobs=1)
    assert code == 0, err
    assert out.strip().startswith("claimed 1, completed 1")


def test_processes_command_runs_two_worker_processes_then_stops_them_on_sigterm(app_dir, database_url, queue):
    [command] = [c for c in commands() if "--processes" in c]
    code, out, err = run_then_sigterm(command, app_dir, database_url, queue, jobs=4)
    assert code == 0, err
    assert "starting 2 worker processes" in err
    assert out.strip() == "claimed 4, completed 4, retried 0, failed 0, lost 0, released 0"


def test_statement_cache_off_command_works_and_writes_no_entry(app_dir, database_url, queue, tmp_path):
    """Beside the same worker without the variable, which stores its compiled statements in
    the user's cache directory (here an empty ``$XDG_CACHE_HOME``)."""
    [command] = [c for c in commands() if c.startswith("SQLA_QUEUE_STATEMENT_CACHE=off ")]
    for cache_home, given in ((tmp_path / "off", command), (tmp_path / "default", command.split(" ", 1)[1])):
        env = {**run_env(database_url), "XDG_CACHE_HOME": str(cache_home)}
        code, out, err = run_then_sigterm(given, app_dir, database_url, queue, jobs=1, env=env)
        assert code == 0, err
        assert out.strip().startswith("claimed 1, completed 1")
    assert not (tmp_path / "off").exists()
    assert list((tmp_path / "default" / "sqla_queue" / "statements").glob("*.json"))


def test_readme_shows_the_worker_command_this_doc_runs():
    readme = (DOC.parents[2] / "README.md").read_text()
    [long_running] = [c for c in commands() if "--concurrency" in c]
    assert f"\n{long_running}\n" in readme

