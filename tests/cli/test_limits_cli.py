"""``sqla-queue enqueue --group-key`` and ``sqla-queue queues limit``, as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

import sqla_queue as sq

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


def test_queues_limit_sets_shows_and_clears(cli, queue):
    queue.enqueue_many([{"task": "send_email", "payload": {}, "group_key": "a"}] * 2)

    done = cli("queues", "limit", "default", "--concurrency", "20", "--group-concurrency", "1", "--rate", "100/s",
               "--group-rate", "5/s")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("queue default: limits concurrency 20, group concurrency 1, rate 100/s, "
                                   "group rate 5/s")
    assert cli("queues", "limit", "default", "--fair").stdout.strip().endswith("group rate 5/s, fair")
    assert queue.list_queues()[0].limits == sq.QueueLimits(
        "default", concurrency=20, group_concurrency=1, rate=sq.Rate(100, timedelta(seconds=1)),
        group_rate=sq.Rate(5, timedelta(seconds=1)), fair=True)

    listed = cli("queues", "list")
    assert "concurrency 20, group concurrency 1" in listed.stdout
    [row] = json.loads(cli("queues", "list", "--json").stdout)
    assert row["limits"] == {"concurrency": 20, "group_concurrency": 1, "rate": "100/s", "group_rate": "5/s",
                             "fair": True}
    stats = json.loads(cli("stats", "--json").stdout)
    assert stats["default"]["limits"]["rate"] == "100/s" and stats["default"]["throttled"] == 0
    assert "limits, and claims they held back" in cli("stats").stdout

    cleared = cli("queues", "limit", "default", "--clear")
    assert cleared.returncode == 0, cleared.stderr
    assert cleared.stdout.strip() == "queue default: limits none"
    assert queue.list_queues()[0].limits is None


@pytest.mark.parametrize(("args", "message"), [
    (["--rate", "100"], "rate must be a count per period such as '100/s', '5/m' or '1000/h', got '100'"),
    (["--group-rate", "0/s"], "group_rate must start with a count from 1"),
    (["--concurrency", "0"], "Invalid value for '--concurrency'"),
    ([], "give --clear, or at least one limit"),
    (["--clear", "--rate", "1/s"], "give --clear, or at least one limit"),
])
def test_queues_limit_refuses_bad_input_and_writes_nothing(cli, queue, args, message):
    queue.set_limits("default", concurrency=4)
    refused = cli("queues", "limit", "default", *args)
    assert refused.returncode != 0 and message in refused.stderr, refused.stderr
    assert queue.list_queues()[0].limits == sq.QueueLimits("default", concurrency=4)
