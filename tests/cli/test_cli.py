"""The ``sqla-queue`` console script, run as a real subprocess: commands and error paths."""

from __future__ import annotations

import json
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

    @queue.task(max_attempts=2)
    def send_email(payload, ctx):
        pass

    @queue.task(queue="risky", max_attempts=1)
    def explode(payload, ctx):
        raise RuntimeError("boom")

    not_a_queue = 42
    """
)


@pytest.fixture
def cli(tmp_path, database_url, queue):
    """Run sqla-queue in a directory holding the app module `cliapp`, on the test database."""
    queue.task(name="explode", queue="risky", max_attempts=1)(lambda payload, ctx: None)
    (tmp_path / "cliapp.py").write_text(APP)
    (tmp_path / "brokenapp.py").write_text("import sqla_queue as sq\nqueue = sq.Queue('mysql://x@y/z')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env["APP_DATABASE_URL"] = database_url

    def run(*args: str, app: str | None = "cliapp:queue") -> subprocess.CompletedProcess:
        argv = [SCRIPT, *(["--app", app] if app else []), *args]
        return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    return run


def test_the_console_script_lists_every_command(cli):
    """Each command's own --help is checked in-process against docs/reference/cli.md
    (tests/docs/test_cli_reference.py); here, the installed script starts and lists them."""
    top = cli("--help", app=None)
    assert top.returncode == 0
    commands = [line.split()[0] for line in top.stdout.split("Commands:")[1].splitlines() if line.strip()]
    assert {"enqueue", "stats", "recover", "worker", "db", "doctor", "jobs", "queues"} <= set(commands)


def test_enqueue_prints_the_id_and_the_job_exists(cli, queue):
    result = cli("enqueue", "send_email", '{"to": "a@b.c"}', "--idempotency-key", "welcome-1")
    assert result.returncode == 0, result.stderr
    job = queue.get_job(int(result.stdout.strip()))
    assert job.task == "send_email" and job.payload == {"to": "a@b.c"}
    again = cli("enqueue", "send_email", '{"to": "a@b.c"}', "--idempotency-key", "welcome-1")
    assert again.stdout == result.stdout  # deduplicated onto the same job


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("enqueue", "send_email", "{not json"), "not valid JSON"),
        (("enqueue", "send_email", "[1, 2]"), "payload must be a dict"),
        (("enqueue", "no_such_task", "{}"), "unknown task 'no_such_task'"),
        (("enqueue", "send_email", "{}", "--max-attempts", "0"), "max_attempts must be between 1"),
        (("enqueue", "send_email", "{}", "--queue", " padded"), "leading or trailing whitespace"),
        (("recover", "--lease", "0"), "Invalid value for '--lease': '0' must be longer than zero"),
        (("worker", "--concurrency", "0"), "0 is not in the range x>=1"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(cli, count_jobs, args, message):
    result = cli(*args)
    assert result.returncode == 2, result
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert count_jobs() == 0


@pytest.mark.parametrize(
    ("app", "message"),
    [
        ("cliapp", "is not of the form module.path:queue_object"),
        ("nowhere:queue", "cannot import module 'nowhere'"),
        ("cliapp:missing", "module 'cliapp' has no attribute 'missing'"),
        ("cliapp:not_a_queue", "cliapp:not_a_queue is a int, not a sqla_queue.Queue"),
        ("brokenapp:queue", "sqla_queue needs a postgresql:// URL, got mysql://"),
    ],
)
def test_bad_app_paths_are_one_line_errors(cli, app, message):
    result = cli("stats", app=app)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_commands_needing_an_app_say_so(cli):
    result = cli("stats", app=None)
    assert result.returncode == 2
    assert "this command needs --app module.path:queue_object" in result.stderr


def test_unreachable_database_is_exit_1_without_secrets(cli):
    result = cli("--database-url", "postgresql://user:hunter2@127.0.0.1:1/nope", "stats")
    assert result.returncode == 1
    assert result.stderr.startswith("Error: database:")
    assert "hunter2" not in result.stderr and "Traceback" not in result.stderr


def test_bad_database_url_is_exit_2(cli):
    result = cli("--database-url", "not a url", "stats")
    assert result.returncode == 2
    assert "not a database URL" in result.stderr


def test_worker_until_empty_runs_the_jobs_and_reports(cli, queue):
    queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(20)])
    queue.enqueue("explode", {})
    result = cli("worker", "--queues", "default,risky", "--concurrency", "4", "--until-empty",
                 "--poll-interval", "0.05")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "claimed 21, completed 20, retried 0, failed 1, lost 0, released 0"
    assert queue.stats()["default"].completed == 20
    assert queue.stats()["risky"].failed == 1


def test_stats_table_and_json(cli, queue):
    queue.enqueue_many([{"task": "send_email", "payload": {}}] * 3 + [{"task": "explode", "payload": {}}])
    table = cli("stats")
    assert table.returncode == 0, table.stderr
    assert "default" in table.stdout and "risky" in table.stdout and "pending" in table.stdout
    data = json.loads(cli("stats", "--json").stdout)
    assert data["default"]["pending"] == 3 and data["default"]["eligible"] == 3
    assert data["risky"]["pending"] == 1


def test_recover_returns_expired_jobs(cli, queue, engine):
    queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="gone")
    with engine.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET lease_expires_at = NULL, locked_at = now() - interval '1 hour'"))
    result = cli("recover", "--lease", "60")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"recovered 1 job(s): {job.id}"
    assert queue.get_job(job.id).last_error == "claim lease expired"
