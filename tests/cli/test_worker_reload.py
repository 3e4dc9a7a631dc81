"""``sqla-queue worker --reload``: a real project in a temporary directory, a real worker
command; editing the project's code restarts the worker process, which then runs the new code."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import text

from waiting import wait_until

SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))

APP = textwrap.dedent(
    """
    import os
    from pathlib import Path

    import sqla_queue as sq

    VERSION = {version}
    queue = sq.Queue(os.environ["APP_DATABASE_URL"], load_entrypoints=False)
    Path(f"started-{{os.getpid()}}-v{{VERSION}}").write_text("")


    @queue.task
    def report(payload, ctx):
        return VERSION
    """
)


def started(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob("started-*"))


@pytest.fixture
def project(tmp_path, database_url, clean_jobs):
    (tmp_path / "reloadapp.py").write_text(APP.format(version=1))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env["APP_DATABASE_URL"] = database_url
    process = subprocess.Popen([SCRIPT, "--app", "reloadapp:queue", "worker", "--reload", "--processes", "1",
                                "--poll-interval", "0.1", "--grace", "2s"],
                               cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        yield tmp_path, process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_editing_the_code_restarts_the_worker_with_the_new_code(project, queue, engine):
    root, process = project
    queue.task(name="report")(lambda payload, ctx: None)
    wait_until(lambda: process.poll() is None and len(started(root)) == 1, "the worker to start")
    [first] = started(root)
    assert first.endswith("-v1") and first != f"started-{process.pid}-v1"  # a child, not the command

    (root / "reloadapp.py").write_text(APP.format(version=2))
    wait_until(lambda: process.poll() is None and any(name.endswith("-v2") for name in started(root)),
               "the worker to restart on the new code")
    job_id = queue.enqueue("report", {})
    wait_until(lambda: _result(engine, job_id) is not None, "the restarted worker to run the job")
    assert _result(engine, job_id) == 2

    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(timeout=60) == 0
    stderr = process.stderr.read()
    assert "watching" in stderr and "reloadapp.py changed, restarting the worker" in stderr
    assert stderr.count("restarting the worker") == 1  # its own files (started-*) are not code
    assert "Traceback" not in stderr and "second signal" not in stderr


def _result(engine, job_id: int):
    with engine.connect() as conn:
        return conn.execute(text("SELECT result FROM sqla_queue_jobs WHERE id = :id AND status = 'completed'"),
                            {"id": job_id}).scalar()


@pytest.mark.parametrize(("args", "says"), [
    (["--reload", "--until-empty"], "--reload and --until-empty contradict"),
    (["--reload-dir", "."], "--reload-dir needs --reload"),
])
def test_reload_misuse_is_a_usage_error(tmp_path, args, says):
    result = subprocess.run([SCRIPT, "--database-url", "postgresql://nowhere/none", "worker", *args],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and says in result.stderr
