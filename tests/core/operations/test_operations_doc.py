"""docs/how-to/operations.md, run as written: its app module, every command on the page in page
order (with the exit status the page shows), and every Python example between them, against a
queue in the state the page describes (`build_scenario`, which also made the pasted output)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

import sqla_queue as sq
from sqla_queue.services.registry import WorkerDescription, WorkerRegistration

DOC = Path(__file__).resolve().parents[3] / "docs" / "how-to" / "operations.md"
SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))
APP = "sqla-queue --app myapp.jobs:queue"

COMMANDS = {  # every command on the page, in page order, with the exit status it documents
    f"{APP} stats": 0,
    f"{APP} stats --json --window 1h": 0,
    f"{APP} stats --watch 5s": 0,
    f"{APP} workers": 0,
    f"{APP} doctor": 1,
    f"{APP} prune --completed-older-than 7d --failed-older-than 30d --cancelled-older-than 7d": 0,
    f"{APP} jobs list --status failed": 0,
    f"{APP} jobs show 7": 0,
    f"{APP} jobs retry 7": 0,
    f"{APP} jobs cancel 9": 0,
    f"{APP} queues pause emails": 0,
    f"{APP} queues list": 0,
    f"{APP} queues resume emails": 0,
    f"{APP} jobs cancel --queue emails --status pending": 0,
}


def steps() -> list[tuple[str, str]]:
    """("python" or "sql", source) and ("command", line) in page order."""
    found = re.findall(r"```(python|console|sql)\n(.*?)```", DOC.read_text(), flags=re.S)
    out: list[tuple[str, str]] = []
    for kind, body in found:
        if kind == "console":
            out.extend(("command", line[2:]) for line in body.splitlines() if line.startswith("$ "))
        else:
            out.append((kind, body))
    return out


def build_scenario(url: str) -> None:
    """The queue the page's output comes from: a worker drained the emails (one bounced three
    times), an images worker crashed holding job 8, job 9 came back from an expired lease, an
    email waits an hour, and a worker polled "reports", which has no jobs."""
    sys.modules.pop("myapp.jobs", None)
    import myapp.jobs as app  # the page's own module

    queue = app.queue
    engine = create_engine(url)

    def sql(statement: str) -> None:
        with engine.begin() as conn:
            conn.execute(text(statement))

    queue.enqueue_many([{"task": "send_email", "payload": {"to": f"user{n}@example.com"}} for n in range(6)])
    queue.enqueue("send_email", {"to": "nobody@example.com", "bounce": True})  # job 7
    for _ in range(3):  # job 7 bounces on every attempt; its retries are made due, not awaited
        queue.worker(queues=["emails"], concurrency=2, poll_interval=0.05, listen=False).run(until_empty=True)
        sql("UPDATE sqla_queue_jobs SET run_at = now() WHERE status = 'pending'")
    queue.enqueue("resize", {"image": "a.png"})  # job 8
    queue.enqueue("resize", {"image": "b.png"})  # job 9
    queue.claim("images", worker_id="crashed-worker", limit=2)
    sql("UPDATE sqla_queue_jobs SET lease_expires_at = NULL, locked_at = now() - interval '10 minutes' WHERE status = 'running'")
    queue.recover_expired(lease=60)
    sql("UPDATE sqla_queue_jobs SET run_at = now() - interval '3 minutes' WHERE id = 8")
    assert [job.id for job in queue.claim("images", worker_id="crashed-worker")] == [8]
    sql("UPDATE sqla_queue_jobs SET lease_expires_at = NULL, locked_at = now() - interval '10 minutes' WHERE id = 8")
    # The images worker's row in the worker registry, as it left it when it was killed.
    assert WorkerRegistration(queue.core, WorkerDescription(
        worker_id="crashed-worker", queues=("images",), tasks=("resize", "send_email"), concurrency=4,
        lease=timedelta(seconds=60), host="worker-2", pid=4711, version=sq.__version__)).register()
    sql("UPDATE sqla_queue_jobs_workers SET started_at = now() - interval '2 hours', "
        "heartbeat_at = now() - interval '10 minutes', expires_at = now() - interval '9 minutes'")
    queue.enqueue("send_email", {"to": "later@example.com"}, delay=3600)  # job 10
    assert queue.claim("emails", worker_id="idle-worker") == []  # only scheduled emails
    assert queue.claim("reports", worker_id="idle-worker") == []  # no such jobs at all
    sql("UPDATE sqla_queue_jobs SET completed_at = now() - interval '10 days' WHERE id <= 3")
    engine.dispose()


@pytest.fixture
def page(tmp_path, create_database, monkeypatch):
    url = create_database()
    [module, *_] = [source for kind, source in steps() if kind == "python"]
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "jobs.py").write_text(module)
    monkeypatch.setenv("SQLA_QUEUE_DATABASE_URL", url)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    build_scenario(url)
    yield tmp_path, url
    sys.modules.pop("myapp.jobs", None)
    sys.modules.pop("myapp", None)


def test_the_page_shows_exactly_these_commands():
    assert [line for kind, line in steps() if kind == "command"] == list(COMMANDS)
    assert [kind for kind, _ in steps()].count("sql") == 1


def test_the_page_runs_as_written(page):
    root, url = page
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env["SQLA_QUEUE_DATABASE_URL"] = url
    namespace: dict = {"__name__": "operations_doc"}
    python_blocks = 0
    for kind, body in steps():
        if kind == "sql":
            _run_sql(url, body)
            continue
        if kind == "python":
            python_blocks += 1
            if python_blocks > 1:  # the first is the app module itself
                exec(compile(body, f"operations.md (python block {python_blocks})", "exec"), namespace)
            continue
        argv = [SCRIPT, *shlex.split(body)[1:]]
        if "--watch" in body:
            returncode, output = _watch_until_first_refresh(argv, root, env)
        else:
            result = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=120)
            returncode, output = result.returncode, result.stdout + result.stderr
        assert returncode == COMMANDS[body], f"`{body}` exited {returncode}:\n{output}"
        assert "Traceback" not in (output if "jobs show" not in body else result.stderr)  # show prints a job's
    _dispose(namespace)


def _run_sql(url: str, statement: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def _watch_until_first_refresh(argv, root, env) -> tuple[int, str]:
    """Ctrl-C ends a watch: send SIGINT once the first refresh is out."""
    process = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in process.stdout:
            lines.append(line)
            if line.startswith("empty claims"):
                break
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, "".join(lines) + out + err


def _dispose(namespace: dict) -> None:
    for value in namespace.values():
        engine = getattr(value, "engine", None)
        if hasattr(engine, "dispose"):
            engine.dispose()
