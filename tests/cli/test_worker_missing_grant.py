"""``sqla-queue worker`` run as a login that lacks a worker's grants (the producer's, from
docs/how-to/database-roles.md) exits 1 by itself, saying which table the database refused and
where the grants are listed, instead of retrying forever."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from roles import Roles

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))
APP = textwrap.dedent(
    """
    import os
    import sqla_queue as sq

    queue = sq.Queue(os.environ["APP_DATABASE_URL"], load_entrypoints=False)

    @queue.task(queue="emails")
    def send_email(payload, ctx):
        return None
    """
)


@pytest.fixture
def producer_app(create_database, tmp_path):
    """An app module whose queue connects as the page's producer login, one job enqueued; the
    command's environment."""
    roles = Roles(create_database())
    try:
        roles.run("roles", "producer", "logins")
        url = roles.login_url("producer")
        (tmp_path / "grantapp.py").write_text(APP)
        producer = roles.queue("producer")
        producer.task(queue="emails", name="send_email")(lambda payload, ctx: None)
        producer.enqueue("send_email", {"to": "a@example.com"})  # a producer may enqueue
        env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
        env["APP_DATABASE_URL"] = url
        yield env
    finally:
        roles.drop()


def worker_command(env: dict[str, str], cwd: Path, processes: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SCRIPT, "--app", "grantapp:queue", "worker", "--queues", "emails", "--processes", str(processes),
         "--poll-interval", "0.05s"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )


def test_the_worker_command_stops_and_names_the_missing_privilege(producer_app, tmp_path):
    result = worker_command(producer_app, tmp_path, processes=1)
    assert result.returncode == 1, result.stderr
    [message] = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert "permission denied for table sqla_queue_jobs" in message
    assert "SQLSTATE 42501" in message and "lacks a privilege" in message
    assert "docs/how-to/database-roles.md" in message
    assert message in (ROOT / "docs" / "how-to" / "database-roles.md").read_text()  # as the page shows it
    assert "stopping: the database role lacks a privilege" in result.stderr  # the worker's log line
    assert "retrying" not in result.stderr


def test_worker_processes_refused_a_privilege_are_not_restarted(producer_app, tmp_path):
    result = worker_command(producer_app, tmp_path, processes=2)
    assert result.returncode == 1, result.stderr
    assert "starting another" not in result.stderr  # no restart: it would be refused the same way
    last = result.stderr.splitlines()[-1]
    assert last.startswith("Error: worker process ") and "permission denied for table sqla_queue_jobs" in last
    assert "no restart can grant it (docs/how-to/database-roles.md)" in last
