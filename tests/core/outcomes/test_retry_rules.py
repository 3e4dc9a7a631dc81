"""Retries that outlast an outage, and the per-task ``retry_on`` / ``no_retry_on`` rules, run on
real PostgreSQL through `sq.testing.drain` (the worker's claim and outcome statements)."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

import sqla_queue as sq
from sqla_queue.errors import ConfigurationError
from sqla_queue.plugins.builtins import backoff
from sqla_queue.queue import DEFAULT_MAX_ATTEMPTS

RETRIES_DOC = Path(__file__).resolve().parents[3] / "docs" / "explanation" / "retries.md"


def test_the_default_schedule_keeps_a_job_alive_through_minutes_of_outage(queue):
    outage = {"down": True}

    @queue.task
    def call_partner(payload, ctx):
        if outage["down"]:
            raise ConnectionError("partner answers 503")
        return "charged"

    job_id = call_partner.enqueue({"order": 1})
    # Runs every retry due within 5 minutes of the one before: the first three waits (at most
    # 15 s, 1 min, 4 min); the fourth waits 8 to 16 minutes. The old schedule (full jitter on
    # 1 s x 2^(n-1)) spent all five attempts within 15 s and failed the job for good.
    ran = sq.testing.drain(queue, advance=timedelta(minutes=5))

    assert [r.outcome for r in ran] == ["retried"] * 4
    assert queue.get_job(job_id).status == sq.JobStatus.PENDING
    outage["down"] = False
    assert [(r.outcome, r.result) for r in sq.testing.drain(queue, advance=timedelta(minutes=20))] == [
        ("completed", "charged")]


def test_retry_on_fails_other_errors_on_their_first_attempt(queue):
    @queue.task(retry_on=(TimeoutError, ConnectionError), max_attempts=10)
    def fetch(payload, ctx):
        raise {"timeout": TimeoutError, "reset": ConnectionResetError, "bug": KeyError}[payload["fail"]]("x")

    ids = {fail: fetch.enqueue({"fail": fail}) for fail in ("timeout", "reset", "bug")}
    sq.testing.drain(queue)

    jobs = {fail: queue.get_job(job_id) for fail, job_id in ids.items()}
    assert {fail: (job.status, job.attempts) for fail, job in jobs.items()} == {
        "timeout": (sq.JobStatus.PENDING, 1),  # retried, subclass matching like `except`
        "reset": (sq.JobStatus.PENDING, 1),
        "bug": (sq.JobStatus.FAILED, 1),  # failed for good with nine attempts left
    }
    assert jobs["bug"].last_error == "KeyError: 'x'"


def test_no_retry_on_wins_inside_retry_on_and_alone(queue):
    @queue.task(retry_on=OSError, no_retry_on=(ConnectionRefusedError, PermissionError))
    def upload(payload, ctx):
        raise {"refused": ConnectionRefusedError, "denied": PermissionError, "io": OSError}[payload["fail"]]("x")

    @queue.task(no_retry_on=ValueError)
    def parse(payload, ctx):
        raise {"value": ValueError, "other": RuntimeError}[payload["fail"]]("x")

    ids = {f"upload-{f}": upload.enqueue({"fail": f}) for f in ("refused", "denied", "io")}
    ids |= {f"parse-{f}": parse.enqueue({"fail": f}) for f in ("value", "other")}
    sq.testing.drain(queue)

    assert {name: queue.get_job(job_id).status for name, job_id in ids.items()} == {
        "upload-refused": sq.JobStatus.FAILED, "upload-denied": sq.JobStatus.FAILED,
        "upload-io": sq.JobStatus.PENDING, "parse-value": sq.JobStatus.FAILED,
        "parse-other": sq.JobStatus.PENDING,
    }


def test_a_task_without_rules_still_asks_the_plugins(queue):
    @queue.task
    def strict(payload, ctx):
        raise sq.NonRetryableError("bad request")

    job_id = strict.enqueue({})
    sq.testing.drain(queue)
    assert queue.get_job(job_id).status == sq.JobStatus.FAILED


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"retry_on": ()}, "retry_on of task 'rules' is empty, so no error would be retried: use max_attempts=1"),
        ({"retry_on": "TimeoutError"}, "retry_on of task 'rules' must be an exception class or a tuple of them"),
        ({"retry_on": (TimeoutError, int)}, "got int (not an exception)"),
        ({"no_retry_on": [ValueError, None]}, "no_retry_on of task 'rules' must be an exception class"),
        ({"retry_on": ConnectionError, "no_retry_on": OSError},
         "every class in retry_on of task 'rules' is also in no_retry_on"),
    ],
)
def test_bad_retry_rules_are_refused_and_register_nothing(make_queue, options, message):
    queue = make_queue(tasks=False)
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        queue.task(name="rules", **options)(lambda payload, ctx: None)
    assert queue.task_names == []


def test_the_docs_table_is_the_default_schedule():
    rows = re.findall(r"^\| (\d) \| ([^|]+) \| ([^|]+) \|$", RETRIES_DOC.read_text(), flags=re.M)
    total_low = total_high = timedelta(0)
    expected = []
    for attempt in range(1, DEFAULT_MAX_ATTEMPTS):
        low, high = backoff.delay_range(attempt)
        total_low, total_high = total_low + low, total_high + high
        expected.append((str(attempt), f"{_span(low)} – {_span(high)}", f"{_span(total_low)} – {_span(total_high)}"))
    assert [tuple(cell.strip() for cell in row) for row in rows] == expected


def _span(duration: timedelta) -> str:
    """``7.5 s``, ``1 min``, ``10 min 37.5 s``: how the docs write a duration."""
    minutes, seconds = divmod(duration.total_seconds(), 60)
    parts = [f"{int(minutes)} min"] if minutes else []
    if seconds or not parts:
        parts.append(f"{seconds:g} s")
    return " ".join(parts)
