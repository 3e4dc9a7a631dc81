"""The operations commands as a user runs them: ``stats`` (table, JSON, watch), ``doctor``,
``prune`` and ``jobs list / retry / cancel``, with their exit codes and error messages."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import text

import sqla_queue as sq
from sqla_queue.services.registry import WorkerDescription, WorkerRegistration


@pytest.fixture
def busy(ops_queue, run_sql):
    """default: 2 completed (1.5 s each), 1 failed, 1 pending; images: 1 scheduled; and an
    empty claim on "reports", a queue without jobs."""
    ops_queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(4)])
    jobs = ops_queue.claim(worker_id="w", limit=3)
    for job in jobs[:2]:
        ops_queue.complete(job.id, job.claim_token)
    ops_queue.fail(jobs[2].id, jobs[2].claim_token, error="bad address")
    run_sql("UPDATE sqla_queue_jobs SET locked_at = completed_at - interval '1.5 seconds' WHERE status = 'completed'")
    ops_queue.enqueue("resize", {}, delay=3600)
    assert ops_queue.claim("reports", worker_id="w") == []
    return ops_queue


def test_stats_tables_show_now_the_window_and_empty_claims(cli, busy):
    result = cli("stats")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "jobs now" in out and "last 15m00s" in out and "empty claims while jobs were pending" in out
    assert "reports (idle)" in out and "1.5s" in out
    for header in ("pending", "eligible", "oldest eligible age", "lease recoveries", "duration p95", "other queue"):
        assert header in out


def test_stats_json_has_every_signal_per_queue(cli, busy):
    result = cli("stats", "--json", "--window", "1h")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == {"default", "images", "reports"}
    default = data["default"]
    assert (default["completed"], default["failed"], default["pending"], default["eligible"]) == (2, 1, 1, 1)
    assert default["duration_p50"] == 1.5 and default["window_seconds"] == 3600.0 and not default["idle"]
    assert data["images"]["scheduled"] == 1
    assert data["reports"] == {**data["reports"], "idle": True, "empty_claims": 1, "empty_claims_other_queue": 1}
    expected = {f for f in vars(sq.QueueHealth(queue="x")) if f != "queue"}
    assert expected <= set(default)


def test_stats_watch_refreshes_as_many_times_as_asked(cli, busy):
    tables = cli("stats", "--watch", "0.05", "--count", "3")
    lines = cli("stats", "--watch", "0.05", "--count", "2", "--json")
    assert tables.returncode == 0 and lines.returncode == 0, tables.stderr + lines.stderr
    assert tables.stdout.count("jobs now") == 3 and tables.stdout.count("-- ") == 3
    assert [json.loads(line)["default"]["pending"] for line in lines.stdout.splitlines()] == [1, 1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("stats", "--window", "15x"), "'15x' is not a duration"),
        (("stats", "--window", "-5m"), "'-5m' is negative"),
        (("stats", "--window", "0s"), "'0s' must be longer than zero"),
        (("stats", "--count", "2"), "--count needs --watch"),
        (("prune",), "give --completed-older-than, --failed-older-than or --cancelled-older-than"),
        (("prune", "--cancelled-older-than", "soon"), "'soon' is not a duration"),
        (("queues", "pause", " emails"), "queue 'emails' has leading or trailing whitespace"),
        (("queues", "resume", ""), "queue must not be empty"),
        (("prune", "--completed-older-than", "a week"), "'a week' is not a duration"),
        (("prune", "--failed-older-than", "7d", "--batch-size", "0"), "batch_size must be a positive integer"),
        (("jobs", "list", "--status", "done"), "'done' is not one of"),
        (("jobs", "list", "--limit", "5000"), "limit must be at most 1000"),
        (("jobs", "list", "--before", "x"), "'x' is not a valid integer"),
        (("jobs", "retry", "seven"), "'seven' is not a valid integer"),
        (("jobs", "cancel", "0"), "job_id must be a positive integer, got 0"),
        (("jobs", "retry", "999"), "job 999 does not exist"),
        (("doctor", "--max-lock-wait", "soon"), "'soon' is not a duration"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(cli, busy, engine, args, message):
    def snapshot():
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text("SELECT * FROM sqla_queue_jobs ORDER BY id"))]

    before = snapshot()
    result = cli(*args)
    assert result.returncode == 2, result
    assert message in result.stderr and "Traceback" not in result.stderr
    assert snapshot() == before


def test_jobs_list_pages_and_prints_json(cli, busy):
    first = cli("jobs", "list", "--limit", "2")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip().endswith("next page: --before 4")
    second = cli("jobs", "list", "--limit", "2", "--before", "4")
    assert "bad address" in second.stdout and second.stdout.strip().endswith("next page: --before 2")
    assert cli("jobs", "list", "--limit", "2", "--before", "2").stdout.strip().endswith("last page")
    data = json.loads(cli("jobs", "list", "--status", "failed", "--json").stdout)
    assert [job["id"] for job in data["jobs"]] == [3] and data["next_before"] is None
    assert data["jobs"][0]["last_error"] == "bad address" and data["jobs"][0]["status"] == "failed"


def test_jobs_retry_and_cancel(cli, busy):
    retried = cli("jobs", "retry", "3")
    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.strip() == "job 3 (send_email on default) is pending again, due now: attempt 2 of 5"
    cancelled = cli("jobs", "cancel", "4")
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.startswith("cancelled job 4 (send_email on default") and '{"n": 3}' in cancelled.stdout
    assert busy.get_job(3).status is sq.JobStatus.PENDING
    assert busy.get_job(4).status is sq.JobStatus.CANCELLED  # kept, not deleted


def test_an_action_the_job_state_refuses_is_exit_1(cli, busy):
    result = cli("jobs", "cancel", "1")
    assert result.returncode == 1
    assert result.stderr.strip() == "Error: job 1 is completed: only pending or running jobs can be cancelled"
    assert busy.get_job(1).status is sq.JobStatus.COMPLETED


def test_prune_reports_what_it_deleted(cli, busy, run_sql, count_jobs):
    run_sql("UPDATE sqla_queue_jobs SET completed_at = now() - interval '8 days' WHERE id = 1")
    result = cli("prune", "--completed-older-than", "7d", "--failed-older-than", "30d")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ("pruned 1 completed, 0 failed and 0 cancelled job(s) and 0 counter row(s) "
                                     "in 3 batch(es)")
    assert count_jobs() == 4


def test_doctor_exits_0_when_healthy_and_1_when_a_check_fails(cli, own_database):
    url, engine = own_database
    healthy = cli("doctor", url=url)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "verdict: OK" in healthy.stdout and "vacuum horizon" in healthy.stdout

    queue = sq.Queue(engine, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")
    queue.enqueue("send_email", {})
    queue.claim(worker_id="crashed")
    with engine.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET lease_expires_at = NULL, locked_at = now() - interval '1 hour'"))
    sick = cli("doctor", "--json", url=url)
    assert sick.returncode == 1
    report = json.loads(sick.stdout)
    assert report["verdict"] == "fail"
    [stuck] = [c for c in report["checks"] if c["name"] == "stuck jobs"]
    assert stuck["verdict"] == "fail" and "sqla-queue recover" in stuck["hint"]
    assert cli("doctor", "--lease", "2h", url=url).returncode == 0  # a longer lease: not stuck yet


def test_doctor_strict_fails_on_warnings(cli, own_database):
    url, engine = own_database
    queue = sq.Queue(engine, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")
    queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w")
    queue.fail(job.id, job.claim_token, error="boom")
    assert cli("doctor", url=url).returncode == 0
    strict = cli("doctor", "--strict", url=url)
    assert strict.returncode == 1 and "WARN" in strict.stdout
    assert cli("doctor", "--max-failed", "0", url=url).returncode == 1


def register(queue: sq.Queue, worker_id: str, queues: list[str], tasks: list[str]) -> WorkerRegistration:
    """A worker's row, written as the worker writes it (alive for a minute)."""
    registration = WorkerRegistration(queue.core, WorkerDescription.of_this_process(
        worker_id, queues, tasks, 4, timedelta(minutes=1)))
    assert registration.register()
    return registration


def test_workers_lists_the_registry_as_a_table_and_as_json(cli, own_database):
    url, engine = own_database
    queue = sq.Queue(engine, load_entrypoints=False)
    assert "no worker registered" in cli("workers", url=url).stdout
    register(queue, "web-1:4242:ab12", ["emails", "default"], ["send_email"])
    register(queue, "web-2:77:cd34", ["images"], ["resize"])
    with engine.begin() as conn:  # web-2 stopped beating a minute ago: dead
        conn.execute(text("UPDATE sqla_queue_jobs_workers SET expires_at = now() - interval '1 minute' "
                          "WHERE id = 'web-2:77:cd34'"))

    table = cli("workers", url=url)
    assert table.returncode == 0, table.stderr
    [live_row] = [line for line in table.stdout.splitlines() if "web-1:4242:ab12" in line]
    [dead_row] = [line for line in table.stdout.splitlines() if "web-2:77:cd34" in line]
    assert "running" in live_row and "emails, default" in live_row and "send_email" in live_row
    assert "dead" in dead_row and "images" in dead_row
    assert table.stdout.index("web-1") < table.stdout.index("web-2")  # live ones first

    as_json = cli("workers", "--json", url=url)
    assert as_json.returncode == 0, as_json.stderr
    [live, dead] = json.loads(as_json.stdout)
    assert {k: live[k] for k in ("id", "status", "alive", "queues", "tasks", "concurrency", "running_job_ids")} == {
        "id": "web-1:4242:ab12", "status": "running", "alive": True, "queues": ["emails", "default"],
        "tasks": ["send_email"], "concurrency": 4, "running_job_ids": []}
    assert (dead["id"], dead["status"], dead["alive"]) == ("web-2:77:cd34", "dead", False)
    assert {"host", "pid", "version", "started_at", "heartbeat_at", "expires_at"} <= set(live)
    assert [w["id"] for w in json.loads(cli("workers", "--json", "--live", url=url).stdout)] == ["web-1:4242:ab12"]


def test_doctor_fails_naming_the_queue_no_live_worker_serves_and_passes_once_one_does(cli, own_database):
    url, engine = own_database
    queue = sq.Queue(engine, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")
    queue.enqueue_many([{"task": "send_email", "payload": {"n": n}, "queue": "emails"} for n in range(5)])

    sick = cli("doctor", "--json", url=url)
    assert sick.returncode == 1, sick.stdout + sick.stderr
    [unserved] = [c for c in json.loads(sick.stdout)["checks"] if c["name"] == "unserved queues"]
    assert unserved["verdict"] == "fail" and unserved["summary"].endswith("no live worker serves: emails")
    assert "unserved queues" in cli("doctor", url=url).stdout

    register(queue, "w-1", ["emails"], ["send_email"])
    healthy = cli("doctor", url=url)
    assert healthy.returncode == 0, healthy.stdout
    with engine.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET run_at = now() - interval '10 minutes'"))
    late = cli("doctor", "--json", "--max-latency", "5m", url=url)
    [latency] = [c for c in json.loads(late.stdout)["checks"] if c["name"] == "queue latency"]
    assert late.returncode == 1 and latency["verdict"] == "fail" and latency["summary"].endswith(": emails")
    assert cli("doctor", "--max-latency", "1h", url=url).returncode == 0
