"""``sqla-queue worker`` run as a login that lacks a worker's grants (the producer's, from
docs/how-to/database-roles.md) exits 1 by itself, saying which table the database refused and
where the grants are listed, instead of retrying forever."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import sqla_queue as sq

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


def test_the_worker_command_stops_and_names_the_missing_privilege(create_database, tmp_path):
    roles = Roles(create_database())
    try:
        roles.run("roles", "producer", "logins")
        url = roles.login_url("producer")
        (tmp_path / "grantapp.py").write_text(APP)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
        env["APP_DATABASE_URL"] = url
        producer = sq.Queue(url, load_entrypoints=False)
        roles.queues.append(producer)
        producer.task(queue="emails", name="send_email")(lambda payload, ctx: None)
        producer.enqueue("send_email", {"to": "a@example.com"})  # a producer may enqueue

        result = subprocess.run(
            [SCRIPT, "--app", "grantapp:queue", "worker", "--queues", "emails", "--processes", "1",
             "--poll-interval", "0.05s"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )
    finally:
        roles.drop()
    assert result.returncode == 1, result.stderr
    [message] = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert "permission denied for table sqla_queue_jobs" in message
    assert "SQLSTATE 42501" in message and "lacks a privilege" in message
    assert "docs/how-to/database-roles.md" in message
    assert "stopping: the database role lacks a privilege" in result.stderr  # the worker's log line
    assert "retrying" not in result.stderr
    assert message in (ROOT / "docs" / "how-to" / "database-roles.md").read_text()  # as the page shows it
