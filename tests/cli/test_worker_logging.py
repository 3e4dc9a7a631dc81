"""``sqla-queue worker --log-level / --log-format`` and the Logging section of
docs/how-to/run-workers.md, as real worker processes on real PostgreSQL: every record gets a
handler with a time and a level, JSON lines carry the job's fields and the stored traceback."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sqlalchemy import insert

import sqla_queue as sq

SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))
DOC = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "run-workers.md"
CARD = "4111-1111-1111-1111"
TEXT_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) [\w.]+: ")

APP = textwrap.dedent(
    """
    import logging
    import os
    import sqla_queue as sq

    queue = sq.Queue(os.environ["APP_DATABASE_URL"], load_entrypoints=False)
    log = logging.getLogger("logapp")

    @queue.task(queue="billing", max_attempts=1)
    def charge_card(payload, ctx):
        card = payload["card"]
        raise ConnectionError(f"gateway postgresql://pay:hunter2@gw/x refused\\nfor {card}")

    @queue.task(queue="billing")
    def send_receipt(payload, ctx):
        log.info("receipt sent")
    """
)


def environment(database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env.update(APP_DATABASE_URL=database_url, SQLA_QUEUE_DATABASE_URL=database_url)
    return env


@pytest.fixture
def worker(tmp_path, database_url, queue):
    """Run ``sqla-queue --app logapp:queue worker --queues billing --until-empty [options]``
    after enqueueing one job that fails and one that completes; returns (result, ids)."""
    (tmp_path / "logapp.py").write_text(APP)
    queue.task(name="charge_card", queue="billing", max_attempts=1)(lambda payload, ctx: None)
    queue.task(name="send_receipt", queue="billing")(lambda payload, ctx: None)

    def run(*options: str) -> tuple[subprocess.CompletedProcess, int, int]:
        failing = queue.enqueue("charge_card", {"card": CARD})
        passing = queue.enqueue("send_receipt", {"card": CARD})
        argv = [SCRIPT, "--app", "logapp:queue", "worker", "--queues", "billing", "--until-empty",
                "--poll-interval", "0.05", *options]
        result = subprocess.run(argv, cwd=tmp_path, env=environment(database_url),
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return result, failing, passing

    return run


def json_lines(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines()]  # every line is one object


def test_json_lines_carry_the_jobs_fields_and_the_stored_traceback(worker, queue):
    result, failing, passing = worker("--log-format", "json")
    entries = json_lines(result.stderr)
    assert all({"time", "level", "logger", "message"} <= set(entry) for entry in entries)
    assert any(e["logger"] == "sqla_queue.worker" and e["level"] == "INFO" for e in entries)  # start/stop

    [failed] = [e for e in entries if e.get("outcome") == "failed"]
    job = queue.get_job(failing)
    assert failed["level"] == "ERROR" and failed["logger"] == "sqla_queue"
    assert (failed["job_id"], failed["task"], failed["queue"], failed["attempt"]) == (
        failing, "charge_card", "billing", 1)
    assert failed["error"] == job.last_error and failed["traceback"] == job.last_traceback
    assert "in charge_card" in failed["traceback"] and "\n" not in failed["message"]

    [completed] = [e for e in entries if e.get("outcome") == "completed"]
    assert completed["job_id"] == passing and completed["attempt"] == 1
    assert isinstance(completed["duration"], float) and completed["duration"] >= 0
    assert {"logger": "logapp", "message": "receipt sent", "level": "INFO"}.items() <= \
        next(e for e in entries if e["logger"] == "logapp").items()  # the handler's own logging

    assert "hunter2" not in result.stderr and CARD not in result.stderr


def test_text_lines_have_a_time_and_a_level_and_the_traceback_follows_a_failure(worker, queue):
    result, failing, _ = worker()
    lines = result.stderr.splitlines()
    records = [line for line in lines if TEXT_LINE.match(line)]
    assert any(" INFO sqla_queue: completed job " in line for line in records)
    assert any(" INFO logapp: receipt sent" in line for line in records)
    [failed] = [i for i, line in enumerate(lines) if " ERROR sqla_queue: " in line]
    trace = queue.get_job(failing).last_traceback
    assert lines[failed + 1: failed + 1 + len(trace.splitlines())] == trace.splitlines()
    assert all(TEXT_LINE.match(line) for line in lines if line not in trace.splitlines())
    assert "hunter2" not in result.stderr and CARD not in result.stderr


def test_log_level_warning_leaves_out_completions(worker):
    result, failing, _ = worker("--log-level", "warning", "--log-format", "json")
    outcomes = [e.get("outcome") for e in json_lines(result.stderr)]
    assert "failed" in outcomes and "completed" not in outcomes
    assert all(e["level"] in ("WARNING", "ERROR") for e in json_lines(result.stderr))


@pytest.mark.parametrize(("option", "value"), [("--log-format", "xml"), ("--log-level", "loud")])
def test_bad_logging_options_are_exit_2(tmp_path, database_url, option, value):
    result = subprocess.run([SCRIPT, "worker", option, value], cwd=tmp_path, env=environment(database_url),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert f"Invalid value for '{option}'" in result.stderr and "Traceback" not in result.stderr


# -- the Logging section of docs/how-to/run-workers.md ----------------------------------------


def doc_blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), flags=re.S)


def doc_command(marker: str) -> list[str]:
    [line] = [line[2:] for block in doc_blocks("console") for line in block.splitlines()
              if line.startswith("$ ") and marker in line]
    words = shlex.split(line)
    assert words[0] == "sqla-queue"
    return [SCRIPT, *words[1:]]


@pytest.fixture
def doc_app(tmp_path, queue):
    """The page's app module at myapp/jobs.py, optionally preceded by another block of the page."""

    def write(prefix: str = "") -> Path:
        package = tmp_path / "myapp"
        package.mkdir(exist_ok=True)
        (package / "__init__.py").write_text("")
        (package / "jobs.py").write_text(prefix + doc_blocks("python")[0] + FAILING_TASK)
        return tmp_path

    return write


# Appended to the page's app: a task that fails for good on its first attempt. (A job of a task
# the app does not register is not claimed at all: it waits for a worker that registers it.)
FAILING_TASK = """

@queue.task(queue="emails", max_attempts=1)
def import_contacts(payload, ctx):
    raise ValueError("the contacts file has no header row")
"""


def insert_failing_job(queue: sq.Queue) -> int:
    """A job of the app's failing task: it fails for good, with a traceback."""
    with queue.engine.begin() as conn:
        return conn.execute(insert(sq.Job.__table__).values(
            queue_name="emails", task="import_contacts", payload={}, max_attempts=1,
        ).returning(sq.Job.__table__.c.id)).scalar_one()


def test_the_json_log_command_on_the_page_logs_failures_as_json(doc_app, database_url, queue):
    root = doc_app()
    process = subprocess.Popen(doc_command("--log-format json"), cwd=root, env=environment(database_url),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        job_id = insert_failing_job(queue)
        give_up = time.monotonic() + 60
        while queue.get_job(job_id).status is not sq.JobStatus.FAILED and time.monotonic() < give_up:
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    [failed] = [e for e in json_lines(err) if e.get("outcome") == "failed"]
    assert failed["job_id"] == job_id and failed["task"] == "import_contacts"
    assert failed["traceback"] == queue.get_job(job_id).last_traceback
    assert failed["traceback"].endswith("ValueError: the contacts file has no header row")


def test_the_pages_dictconfig_is_kept_by_the_worker(doc_app, database_url, queue):
    [logging_block] = [block for block in doc_blocks("python") if "dictConfig" in block]
    root = doc_app(prefix=logging_block + "\n")
    failing = insert_failing_job(queue)
    passing = queue.enqueue("send_email", {"to": "a@b.c"}, queue="emails")
    result = subprocess.run(doc_command("--until-empty"), cwd=root, env=environment(database_url),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    entries = json_lines(result.stderr)  # the app's JSON handler, not the worker's text default
    assert {(e.get("job_id"), e.get("outcome")) for e in entries} >= {(failing, "failed"), (passing, "completed")}
    [failed] = [e for e in entries if e.get("outcome") == "failed"]
    assert failed["traceback"] == queue.get_job(failing).last_traceback


def test_a_logging_flag_on_the_command_line_replaces_the_apps_setup(doc_app, database_url, queue):
    [logging_block] = [block for block in doc_blocks("python") if "dictConfig" in block]
    root = doc_app(prefix=logging_block + "\n")
    job_id = queue.enqueue("send_email", {"to": "a@b.c"}, queue="emails")
    argv = [*doc_command("--until-empty"), "--log-format", "text"]
    result = subprocess.run(argv, cwd=root, env=environment(database_url), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines and all(TEXT_LINE.match(line) for line in lines)
    assert any(f"completed job {job_id} " in line for line in lines)


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({"trace_id": "ab" * 16, "span_id": "cd" * 8}, {"trace_id": "ab" * 16, "span_id": "cd" * 8}),
        ({"otelTraceID": "ab" * 16, "otelSpanID": "cd" * 8}, {"trace_id": "ab" * 16, "span_id": "cd" * 8}),
        ({"otelTraceID": "0", "otelSpanID": "0"}, {}),  # OpenTelemetry's "no span"
        ({}, {}),
    ],
)
def test_json_lines_carry_the_trace_a_record_belongs_to(attributes, expected):
    import logging

    from sqla_queue.logformat import JsonFormatter

    record = logging.LogRecord("myapp", logging.INFO, __file__, 1, "charging", None, None)
    record.__dict__.update(attributes)
    entry = json.loads(JsonFormatter().format(record))
    assert {key: entry[key] for key in ("trace_id", "span_id") if key in entry} == expected
