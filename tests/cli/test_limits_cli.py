"""``sqla-queue enqueue --group-key`` and ``sqla-queue queues limit``, as real subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import text

SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))

APP = textwrap.dedent(
    """
    import os
    import sqla_queue as sq

    queue = sq.Queue(os.environ["APP_DATABASE_URL"], load_entrypoints=False)

    @queue.task
    def send_email(payload, ctx):
        pass
    """
)


@pytest.fixture
def cli(tmp_path, database_url):
    (tmp_path / "limitsapp.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env["APP_DATABASE_URL"] = database_url

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([SCRIPT, "--app", "limitsapp:queue", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    return run


def test_enqueue_with_a_group_key(cli, queue, engine):
    done = cli("enqueue", "send_email", "{}", "--group-key", "tenant-9")
    assert done.returncode == 0, done.stderr
    with engine.connect() as conn:
        assert conn.execute(text("SELECT group_key FROM sqla_queue_jobs")).scalars().all() == ["tenant-9"]
