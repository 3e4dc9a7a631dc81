"""``sqla-queue jobs show`` and the bounded payload of every ``jobs`` command, as real
subprocesses on real PostgreSQL: a failed job's stored traceback is shown, a multi-megabyte
payload never is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import insert

import sqla_queue as sq
from sqla_queue.cli._params import PAYLOAD_PREVIEW_CHARS

SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))
CARD = "4111-1111-1111-1111"
BIG = 3 * 1024 * 1024  # characters of the big payload's string
BOUNDED = PAYLOAD_PREVIEW_CHARS + 4096  # generous room for everything around the payload

APP = textwrap.dedent(
    """
    import os
    import sqla_queue as sq

    queue = sq.Queue(os.environ["APP_DATABASE_URL"], load_entrypoints=False)

    @queue.task(queue="billing", max_attempts=1)
    def charge_card(payload, ctx):
        card = payload["card"]
        raise ConnectionError(f"gateway postgresql://pay:hunter2@gw/x refused\\nfor {card}")
    """
)


@pytest.fixture
def cli(tmp_path, database_url, queue):
    (tmp_path / "showapp.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env["APP_DATABASE_URL"] = database_url

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([SCRIPT, "--app", "showapp:queue", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    return run


def insert_job(engine, payload: dict, **values) -> int:
    """Straight into the table: a payload as large as any row may already hold."""
    with engine.begin() as conn:
        return conn.execute(
            insert(sq.Job.__table__)
            .values(queue_name="default", task="send_email", payload=payload, **values)
            .returning(sq.Job.__table__.c.id)
        ).scalar_one()


@pytest.fixture
def failed_job(cli, queue) -> int:
    queue.task(name="charge_card", queue="billing", max_attempts=1)(lambda payload, ctx: None)
    job_id = queue.enqueue("charge_card", {"card": CARD}, queue="billing")
    result = cli("worker", "--queues", "billing", "--until-empty", "--poll-interval", "0.05")
    assert result.returncode == 0, result.stderr
    assert queue.get_job(job_id).status is sq.JobStatus.FAILED
    return job_id


def test_show_prints_the_state_the_error_and_where_it_was_raised(cli, queue, failed_job):
    result = cli("jobs", "show", str(failed_job))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    job = queue.get_job(failed_job)
    assert out.startswith(f"job {failed_job}\n")
    for line in ("status:          failed", "queue:           billing", "task:            charge_card",
                 "attempts:        1/1", f"locked by:       {job.locked_by}",
                 "last error:      ConnectionError: gateway postgresql://***@gw/x refused",
                 "idempotency key: -"):
        assert f"\n  {line}\n" in out, line
    traceback = out.split("\ntraceback:\n", 1)[1].split("\npayload:\n", 1)[0]
    assert traceback.splitlines() == [f"  {line}" for line in job.last_traceback.splitlines()]
    assert 'in charge_card' in traceback and 'raise ConnectionError(' in traceback
    assert "hunter2" not in traceback and CARD not in traceback
    assert out.rstrip().endswith(json.dumps({"card": CARD}, indent=2))  # a small payload in full


def test_show_json_has_every_field_and_the_traceback(cli, queue, failed_job):
    result = cli("jobs", "show", str(failed_job), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    job = queue.get_job(failed_job)
    assert data["last_traceback"] == job.last_traceback and data["last_error"] == job.last_error
    assert (data["id"], data["status"], data["attempts"]) == (failed_job, "failed", 1)
    assert data["payload"] == {"card": CARD} and data["payload_truncated"] is False
    assert data["payload_bytes"] == len(json.dumps({"card": CARD}, separators=(",", ":")))


def test_show_and_cancel_bound_a_multi_megabyte_payload(cli, queue):
    payload = {"blob": "x" * BIG, "note": "ü"}
    job_id = insert_job(queue.engine, payload)
    size = len(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode())
    said = f"… ({size:,} bytes in all)"

    shown = cli("jobs", "show", str(job_id))
    assert shown.returncode == 0, shown.stderr
    assert len(shown.stdout) < BOUNDED and shown.stdout.rstrip().endswith(said)

    as_json = cli("jobs", "show", str(job_id), "--json")
    assert len(as_json.stdout) < BOUNDED
    data = json.loads(as_json.stdout)
    assert data["payload"] is None and data["payload_truncated"] is True and data["payload_bytes"] == size
    assert data["payload_preview"] == json.dumps(payload, indent=2, ensure_ascii=False)[:PAYLOAD_PREVIEW_CHARS]

    full = cli("jobs", "show", str(job_id), "--json", "--full-payload")
    assert json.loads(full.stdout)["payload"] == payload  # asked for: all of it

    listed = cli("jobs", "list", "--json")
    assert len(listed.stdout) < BOUNDED and json.loads(listed.stdout)["jobs"][0]["payload_truncated"]

    cancelled = cli("jobs", "cancel", str(job_id))
    assert cancelled.returncode == 0, cancelled.stderr
    assert len(cancelled.stdout) < BOUNDED and cancelled.stdout.rstrip().endswith(said)
    assert cancelled.stdout.startswith(f"cancelled job {job_id} (send_email on default")
    assert queue.get_job(job_id).status is sq.JobStatus.CANCELLED


def test_cancel_prints_a_small_payload_whole_on_its_line(cli, queue):
    job_id = insert_job(queue.engine, {"image": "b.png"})
    result = cli("jobs", "cancel", str(job_id))
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith('; payload: {"image": "b.png"}')


def test_an_unknown_job_id_is_exit_1_with_a_clear_message(cli, queue):
    result = cli("jobs", "show", "987654")
    assert result.returncode == 1
    assert result.stderr.strip() == "Error: no job with id 987654"
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("jobs", "show", "abc"), "'abc' is not a valid integer"),
        (("jobs", "show", "0"), "0 is not in the range x>=1"),
        (("jobs", "show", "1", "--full-payload"), "--full-payload needs --json"),
    ],
)
def test_bad_usage_is_exit_2(cli, args, message):
    result = cli(*args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_show_lists_dependencies_and_dependents_and_list_filters_waiting_jobs(cli, queue):
    first, second, third = queue.enqueue_many([
        {"task": "send_email", "payload": {}},
        {"task": "send_email", "payload": {}, "depends_on": [sq.Earlier(0)], "on_dependency_failure": "run"},
        {"task": "send_email", "payload": {}, "depends_on": [sq.Earlier(1)]},
    ])
    shown = cli("jobs", "show", str(second))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.endswith(f"depends on:\n  job {first} send_email pending (runs even if it fails)\n"
                                 f"dependents:\n  job {third} send_email waiting\n")
    data = json.loads(cli("jobs", "show", str(second), "--json").stdout)
    assert data["depends_on"] == [{"id": first, "task": "send_email", "status": "pending", "run_anyway": True}]
    assert [edge["id"] for edge in data["dependents"]] == [third]
    for flags in (["--status", "waiting"], ["--waiting"]):
        listed = cli("jobs", "list", *flags, "--json")
        assert listed.returncode == 0, listed.stderr
        assert sorted(job["id"] for job in json.loads(listed.stdout)["jobs"]) == [second, third]
    refused = cli("jobs", "list", "--waiting", "--status", "failed")
    assert refused.returncode == 2 and "cannot be combined with --status failed" in refused.stderr
