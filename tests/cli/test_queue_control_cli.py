"""``sqla-queue queues list / pause / resume / limit``, ``enqueue --group-key``, ``jobs cancel`` of
a pending and a running job, and what ``jobs list``, ``jobs show``, ``stats`` and ``prune`` say
about priorities, pauses, limits and cancelled jobs, as real subprocesses."""

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

    @queue.task(queue="images")
    def resize(payload, ctx):
        pass
    """
)


@pytest.fixture
def cli(tmp_path, database_url):
    (tmp_path / "controlapp.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env["APP_DATABASE_URL"] = database_url

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([SCRIPT, "--app", "controlapp:queue", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    return run


def test_pause_list_and_resume(cli, queue):
    queue.enqueue_many([{"task": "send_email", "payload": {}}] * 2)

    paused = cli("queues", "pause", "default")
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith("queue default is paused since ")
    assert "workers claim none of its 2 pending job(s) until `queues resume default`" in paused.stdout
    assert cli("queues", "pause", "reports").returncode == 0

    listed = cli("queues", "list")
    assert listed.returncode == 0, listed.stderr
    rows = [line for line in listed.stdout.splitlines() if "default" in line or "reports" in line]
    assert len(rows) == 2 and all("paused" in row for row in rows)
    data = json.loads(cli("queues", "list", "--json").stdout)
    assert [(q["name"], q["paused"], q["pending"]) for q in data] == [("default", True, 2), ("reports", True, 0)]
    assert data[0]["paused_at"] == queue.list_queues()[0].paused_at.isoformat()

    stats = json.loads(cli("stats", "--json").stdout)
    assert stats["default"]["paused"] is True and stats["reports"]["paused"] is True
    assert "default (paused)" in cli("stats").stdout

    resumed = cli("queues", "resume", "default")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "queue default is active: workers claim its 2 pending job(s) again"
    assert [q.paused for q in queue.list_queues()] == [False, True]


def test_cancel_says_whether_it_cancelled_or_asked_the_worker(cli, queue):
    running = queue.enqueue("send_email", {"n": 1})
    [job] = queue.claim(worker_id="web-1")
    pending = queue.enqueue("send_email", {"n": 2})

    asked = cli("jobs", "cancel", str(running))
    cancelled = cli("jobs", "cancel", str(pending))

    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.startswith(f"cancel requested for running job {running} (send_email on default")
    assert "held by web-1): it ends cancelled when its handler returns or raises" in asked.stdout
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.startswith(f"cancelled job {pending} (send_email on default")
    assert queue.get_job(pending).status is sq.JobStatus.CANCELLED
    assert queue.get_job(running).status is sq.JobStatus.RUNNING and queue.get_job(running).cancel_requested_at

    again = cli("jobs", "cancel", str(pending))
    assert again.returncode == 1
    assert again.stderr.strip() == f"Error: job {pending} is cancelled: only pending or running jobs can be cancelled"


def test_jobs_list_shows_priority_and_filters_cancelled_jobs(cli, queue):
    urgent = queue.enqueue("send_email", {}, priority=7)
    gone = queue.enqueue("resize", {}, priority=-3)
    queue.cancel(gone)

    listed = cli("jobs", "list")
    assert listed.returncode == 0, listed.stderr
    header = next(line for line in listed.stdout.splitlines() if "status" in line)
    assert "priority" in header
    [urgent_row] = [line for line in listed.stdout.splitlines() if f" {urgent} " in line]
    assert " 7 " in urgent_row and "pending" in urgent_row

    only = json.loads(cli("jobs", "list", "--status", "cancelled", "--json").stdout)
    assert [(j["id"], j["priority"], j["status"]) for j in only["jobs"]] == [(gone, -3, "cancelled")]
    assert only["jobs"][0]["cancelled_at"] is not None


def test_jobs_show_prints_the_new_fields(cli, queue):
    job_id = queue.enqueue("send_email", {}, priority=5)
    queue.cancel(job_id)

    shown = cli("jobs", "show", str(job_id))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    for label in ("priority:        5", "snoozes:         0", "scheduled at:    -", "cancel request:  -"):
        assert f"  {label}" in lines, shown.stdout
    assert any(line.startswith("  cancelled at:    20") for line in lines), shown.stdout
    data = json.loads(cli("jobs", "show", str(job_id), "--json").stdout)
    assert {"priority": 5, "snoozes": 0, "result": None, "status": "cancelled"}.items() <= data.items()


def test_jobs_show_prints_a_result(cli, queue, engine):
    job_id = queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w")
    queue.complete(job.id, job.claim_token)
    with engine.begin() as conn:  # what a handler's return value leaves
        conn.execute(text("UPDATE sqla_queue_jobs SET result = '{\"sent\": 3}' WHERE id = :id"), {"id": job_id})
    shown = cli("jobs", "show", str(job_id))
    assert shown.stdout.rstrip().endswith('result:\n{\n  "sent": 3\n}'), shown.stdout


def test_prune_deletes_old_cancelled_jobs(cli, queue, engine):
    old, recent = (queue.enqueue("send_email", {}) for _ in range(2))
    queue.cancel(old)
    queue.cancel(recent)
    with engine.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET cancelled_at = now() - interval '3 days' WHERE id = :id"),
                     {"id": old})
    result = cli("prune", "--cancelled-older-than", "1d")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ("pruned 0 completed, 0 failed and 1 cancelled job(s) and 0 counter row(s) "
                                     "in 2 batch(es)")
    assert queue.get_job(old) is None and queue.get_job(recent).status is sq.JobStatus.CANCELLED


def test_queues_need_only_the_database_url(database_url, queue):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env["SQLA_QUEUE_DATABASE_URL"] = database_url
    paused = subprocess.run([SCRIPT, "queues", "pause", "reports"], env=env, capture_output=True, text=True,
                            timeout=120)
    assert paused.returncode == 0, paused.stderr
    assert [(q.name, q.paused) for q in queue.list_queues()] == [("reports", True)]


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
    assert stats["default"]["limits"]["rate"] == "100/s" and isinstance(stats["default"]["throttled"], int)
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
