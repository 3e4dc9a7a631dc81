"""Operating the queue with only a database URL (no --app, no application code), and --app from
SQLA_QUEUE_APP: the ``sqla-queue`` console script as a real subprocess, on real PostgreSQL."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import text

import sqla_queue as sq

SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))
DOC = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "operations.md"

APP = textwrap.dedent(
    """
    import os
    import sqla_queue as sq

    queue = sq.Queue(os.environ["SQLA_QUEUE_DATABASE_URL"], load_entrypoints=False)

    @queue.task
    def send_email(payload, ctx):
        pass
    """
)


@pytest.fixture
def bastion(tmp_path):
    """An empty directory: no application module anywhere near the command."""
    (tmp_path / "bastion").mkdir()
    return tmp_path / "bastion"


@pytest.fixture
def cli(bastion, database_url, queue):
    """Run sqla-queue in `bastion` with nothing but SQLA_QUEUE_DATABASE_URL (unless told)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}

    def run(*args: str, cwd: Path = bastion, **env: str) -> subprocess.CompletedProcess:
        environment = {**base, "SQLA_QUEUE_DATABASE_URL": database_url, **env}
        return subprocess.run([SCRIPT, *args], cwd=cwd, env=environment, capture_output=True, text=True,
                              timeout=120)

    return run


def failed_job(queue) -> int:
    @queue.task(name="explode", max_attempts=1)
    def explode(payload, ctx):
        raise RuntimeError("boom")

    job_id = queue.enqueue("explode", {})
    queue.worker(poll_interval=0.05, listen=False).run(until_empty=True)
    assert queue.get_job(job_id).status is sq.JobStatus.FAILED
    return job_id


def test_stats_table_and_json_from_a_url(cli, queue, database_url):
    queue.enqueue("send_email", {})
    queue.enqueue("resize", {})
    table = cli("stats")
    assert table.returncode == 0, table.stderr
    assert "jobs now" in table.stdout and "images" in table.stdout
    as_json = cli("stats", "--json")
    assert as_json.returncode == 0, as_json.stderr
    stats = json.loads(as_json.stdout)
    assert stats["default"]["pending"] == 1 and stats["images"]["pending"] == 1
    # --database-url does the same as the variable.
    flag = cli("--database-url", database_url, "stats", "--json", SQLA_QUEUE_DATABASE_URL="")
    assert flag.returncode == 0, flag.stderr
    assert json.loads(flag.stdout)["default"]["pending"] == 1


def test_doctor_from_a_url(cli, queue):
    result = cli("doctor", "--json")
    report = json.loads(result.stdout)
    names = {check["name"] for check in report["checks"]}
    assert {"claim plan", "dead tuples", "stuck jobs", "recent failures"} <= names, names
    assert not [c for c in report["checks"] if "not found" in c["summary"]]  # it read the URL's table
    assert result.returncode == (1 if report["verdict"] == "fail" else 0), result.stderr


def test_jobs_list_retry_and_cancel_from_a_url(cli, queue):
    failed = failed_job(queue)
    pending = queue.enqueue("send_email", {"to": "a@b.c"})
    listed = cli("jobs", "list", "--status", "failed", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [job["id"] for job in json.loads(listed.stdout)["jobs"]] == [failed]
    retried = cli("jobs", "retry", str(failed))
    assert retried.returncode == 0, retried.stderr
    assert queue.get_job(failed).status is sq.JobStatus.PENDING
    cancelled = cli("jobs", "cancel", str(pending))
    assert cancelled.returncode == 0, cancelled.stderr
    assert queue.get_job(pending).status is sq.JobStatus.CANCELLED


def test_recover_and_prune_from_a_url(cli, queue, engine):
    expired = queue.enqueue("send_email", {})
    old = queue.enqueue("send_email", {})
    [job] = queue.claim("default", worker_id="crashed-worker", limit=1)
    assert job.id == expired
    with engine.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET lease_expires_at = NULL, locked_at = now() - interval '10 minutes' "
                          "WHERE id = :id"), {"id": expired})
        conn.execute(text("UPDATE sqla_queue_jobs SET status = 'completed', completed_at = now() - "
                          "interval '10 days' WHERE id = :id"), {"id": old})
    recovered = cli("recover", "--lease", "60")
    assert recovered.returncode == 0, recovered.stderr
    assert recovered.stdout.strip() == f"recovered 1 job(s): {expired}"
    assert queue.get_job(expired).status is sq.JobStatus.PENDING
    pruned = cli("prune", "--completed-older-than", "7d")
    assert pruned.returncode == 0, pruned.stderr
    assert pruned.stdout.startswith("pruned 1 completed, 0 failed and 0 cancelled job(s)")
    assert queue.get_job(old) is None


@pytest.mark.parametrize(
    ("args", "command"),
    [(("worker", "--until-empty"), "worker"), (("enqueue", "send_email", "{}"), "enqueue")],
)
def test_commands_that_run_tasks_still_need_the_app(cli, queue, count_jobs, args, command):
    waiting = queue.enqueue("send_email", {})
    result = cli(*args)
    assert result.returncode == 2
    assert f"`{command}` runs your application's tasks: it needs --app module.path:queue_object " \
           "(or $SQLA_QUEUE_APP)" in result.stderr
    assert "Traceback" not in result.stderr
    assert count_jobs() == 1 and queue.get_job(waiting).status is sq.JobStatus.PENDING


def test_without_an_app_or_a_url_both_ways_are_named(cli):
    result = cli("stats", SQLA_QUEUE_DATABASE_URL="")
    assert result.returncode == 2
    assert ("this command needs --app module.path:queue_object, or a database URL for the default job "
            "table: --database-url or $SQLA_QUEUE_DATABASE_URL") in result.stderr


def test_the_app_can_come_from_sqla_queue_app(cli, bastion, queue):
    (bastion / "shop.py").write_text(APP)
    enqueued = cli("enqueue", "send_email", '{"to": "a@b.c"}', SQLA_QUEUE_APP="shop:queue")
    assert enqueued.returncode == 0, enqueued.stderr
    job_id = int(enqueued.stdout)
    worked = cli("worker", "--until-empty", "--no-listen", SQLA_QUEUE_APP="shop:queue")
    assert worked.returncode == 0, worked.stderr
    assert queue.get_job(job_id).status is sq.JobStatus.COMPLETED
    # An explicit --app wins over the variable.
    explicit = cli("--app", "nowhere:queue", "stats", SQLA_QUEUE_APP="shop:queue")
    assert explicit.returncode == 2 and "cannot import module 'nowhere'" in explicit.stderr


def doc_section_scripts() -> list[str]:
    section = DOC.read_text().split("## Without the application's code", 1)[1]
    return re.findall(r"```shell\n(.*?)```", section, flags=re.S)


def test_the_operations_doc_section_runs_as_written(tmp_path, database_url, queue, engine):
    """The section's shell blocks, in order, as one shell session, in a directory holding the
    page's own application module (myapp/jobs.py), with the URL in DATABASE_URL."""
    scripts = doc_section_scripts()
    assert len(scripts) == 2
    page = DOC.read_text()
    [module] = re.findall(r"```python\n(.*?)```", page, flags=re.S)[:1]
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "jobs.py").write_text(module)
    failed = failed_job(queue)
    expired = queue.enqueue("send_email", {})
    queue.claim("default", worker_id="crashed-worker")
    with engine.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET lease_expires_at = NULL, locked_at = now() - interval '10 minutes' "
                          "WHERE id = :id"), {"id": expired})
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env["DATABASE_URL"] = database_url
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(scripts)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    assert re.search(rf"│\s+{failed} │ failed ", result.stdout), result.stdout
    assert f"recovered 1 job(s): {expired}" in result.stdout
    enqueued = int(result.stdout.strip().splitlines()[-1])
    assert queue.get_job(enqueued).payload == {"to": "ops@example.com"}
    assert queue.get_job(expired).status is sq.JobStatus.PENDING
