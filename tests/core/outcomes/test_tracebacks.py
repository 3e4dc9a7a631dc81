"""Where a failed attempt raised: stored with the job (bounded, sanitized), on the retried and
failed events (with the exception object itself), and in the logging plugin's records."""

from __future__ import annotations

import json
import logging
import re
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

import sqla_queue as sq
from sqla_queue._sanitize import MAX_TRACEBACK_LENGTH, traceback_text
from sqla_queue.logformat import JsonFormatter
from sqla_queue.types import JobFailed, JobRetried

CARD = "4111-1111-1111-1111"  # a payload value: never in the traceback
PASSWORD = "hunter2"  # a credential in the exception message: masked
EVENTS_DOC = Path(__file__).resolve().parents[3] / "docs" / "reference" / "events.md"


class Recorder:
    """An in-process plugin keeping every retried and failed event."""

    def __init__(self) -> None:
        self.events: list = []

    @sq.hookimpl
    def sqla_queue_job_retried(self, event):
        self.events.append(event)

    @sq.hookimpl
    def sqla_queue_job_failed(self, event):
        self.events.append(event)


class RetryInAnHour:
    """A fixed backoff: a retried job is never run again by the same drain (see `make_due`)."""

    @sq.hookimpl
    def sqla_queue_retry_delay(self, job, attempt):
        return timedelta(hours=1)


def charge(payload: dict) -> None:
    card = payload["card"]  # a local variable holding a payload value
    try:
        raise LookupError(f"no account for card {card}")  # a chained cause quoting the payload
    except LookupError as exc:
        raise ConnectionError(
            f"billing at postgresql://billing:{PASSWORD}@db.internal/pay refused\nfor card {card}"
        ) from exc


def recurse(depth: int) -> None:
    if depth == 0:
        raise RecursionError("gave up at the bottom")
    recurse(depth - 1)


def run_worker(queue: sq.Queue) -> None:
    queue.worker(queues=["billing"], concurrency=1, poll_interval=0.05, listen=False).run(until_empty=True)


def make_due(engine: Engine) -> None:
    """A retried job waits out its backoff; these tests do not."""
    with engine.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET run_at = now() WHERE status = 'pending'"))


@pytest.fixture
def billing(engine: Engine, clean_jobs):
    """A queue whose `charge` task raises, with a recording plugin, and the raised objects."""
    recorder = Recorder()
    queue = sq.Queue(engine, plugins=[recorder, RetryInAnHour()], load_entrypoints=False)
    raised: list[BaseException] = []

    @queue.task(queue="billing", max_attempts=2)
    def charge_card(payload, ctx):
        try:
            charge(payload)
        except ConnectionError as exc:
            raised.append(exc)
            raise

    return queue, recorder, raised


def test_a_failing_handlers_traceback_is_stored_bounded_and_sanitized(billing):
    queue, _, _ = billing
    job_id = queue.enqueue("charge_card", {"card": CARD})
    run_worker(queue)

    job = queue.get_job(job_id)
    assert job.status is sq.JobStatus.PENDING and job.attempts == 1
    trace = job.last_traceback
    assert trace.startswith("Traceback (most recent call last):")
    assert "in charge_card" in trace and "charge(payload)" in trace  # frame and source line
    assert "sqla_queue/worker/" not in trace  # it starts in the handler, not in the worker
    assert 'raise ConnectionError(' in trace and "in charge\n" in trace
    assert "LookupError (message not stored)" in trace  # the cause: its type, never its message
    assert "The above exception was the direct cause of the following exception:" in trace
    assert trace.splitlines()[-1] == job.last_error  # the same one-line error, last
    assert job.last_error == "ConnectionError: billing at postgresql://***@db.internal/pay refused"
    assert CARD not in trace and PASSWORD not in trace
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", trace)
    assert len(trace) <= MAX_TRACEBACK_LENGTH


def test_the_next_claim_clears_it_with_last_error_and_the_last_failure_keeps_its_own(billing):
    queue, _, _ = billing
    job_id = queue.enqueue("charge_card", {"card": CARD})
    run_worker(queue)
    make_due(queue.engine)
    [job] = queue.claim("billing", worker_id="inspector")
    view = queue.get_job(job_id)
    assert (view.last_error, view.last_traceback) == (None, None)

    assert queue.fail(job.id, job.claim_token, error="given up by hand")
    view = queue.get_job(job_id)
    assert view.status is sq.JobStatus.FAILED
    assert (view.last_error, view.last_traceback) == ("given up by hand", None)


def test_events_carry_the_exception_object_and_the_stored_traceback(billing):
    queue, recorder, raised = billing
    job_id = queue.enqueue("charge_card", {"card": CARD})
    run_worker(queue)  # attempt 1: retried
    make_due(queue.engine)
    run_worker(queue)  # attempt 2 of 2: failed

    retried, failed = recorder.events
    assert isinstance(retried, JobRetried) and isinstance(failed, JobFailed)
    assert retried.exception is raised[0] and failed.exception is raised[1]
    assert isinstance(failed.exception.__cause__, LookupError)  # the live object, chain and all
    assert failed.traceback == queue.get_job(job_id).last_traceback
    assert retried.traceback.splitlines()[-1] == retried.error
    assert CARD not in repr(failed) and "exception" not in repr(failed)


def recording_queue(engine: Engine) -> tuple[sq.Queue, Recorder]:
    recorder = Recorder()
    queue = sq.Queue(engine, plugins=[recorder], load_entrypoints=False)
    queue.task(name="send_email")(lambda payload, ctx: None)
    return queue, recorder


def test_an_outcome_recorded_from_a_string_has_no_exception_and_no_traceback(engine, clean_jobs):
    queue, recorder = recording_queue(engine)
    job_id = queue.enqueue("send_email", {"to": "a@b.c"})
    [job] = queue.claim("default", worker_id="w")
    queue.retry(job.id, job.claim_token, error="smtp timeout")
    [event] = recorder.events
    assert (event.error, event.exception, event.traceback) == ("smtp timeout", None, None)
    assert queue.get_job(job_id).last_traceback is None


def test_an_exception_passed_to_fail_is_on_the_event_and_its_traceback_stored(engine, clean_jobs):
    queue, recorder = recording_queue(engine)
    job_id = queue.enqueue("send_email", {"to": "a@b.c"})
    [job] = queue.claim("default", worker_id="w")
    try:
        recurse(5)
    except RecursionError as exc:
        error = exc
    assert queue.fail(job.id, job.claim_token, error=error)
    [event] = recorder.events
    assert event.exception is error
    assert event.traceback.count("in recurse") == 6
    assert queue.get_job(job_id).last_traceback == event.traceback


def test_a_deep_traceback_keeps_its_innermost_frames_within_the_bound():
    try:
        recurse(500)
    except RecursionError as exc:
        trace = traceback_text(exc)
    assert len(trace) <= MAX_TRACEBACK_LENGTH
    lines = trace.splitlines()
    assert lines[0].startswith("… ") and "earlier entries omitted" in lines[0]
    assert lines[-1] == "RecursionError: gave up at the bottom"
    assert lines[-2].strip() == 'raise RecursionError("gave up at the bottom")'


def test_no_traceback_for_a_string_or_an_exception_never_raised():
    assert traceback_text("boom") is None
    assert traceback_text(ValueError("never raised")) is None


def test_control_characters_in_frames_and_secrets_in_source_lines_are_cleaned():
    namespace: dict = {}
    source = 'def f():\n    token = "x"; raise ValueError("bad\\x00byte")  # password=s3cr3t\n'
    exec(compile(source, "odd\x07name.py", "exec"), namespace)  # a file name with a control char
    try:
        namespace["f"]()
    except ValueError as exc:
        trace = traceback_text(exc)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", trace)
    assert 'File "odd name.py", line 2, in f' in trace
    assert trace.splitlines()[-1] == "ValueError: bad byte"


def test_the_error_reporter_example_in_events_md_sees_the_exception(engine, clean_jobs):
    [example] = re.findall(r"```python\n(.*?)```", EVENTS_DOC.read_text(), flags=re.S)
    namespace: dict = {"__name__": "events_md"}
    exec(compile(example, "events.md", "exec"), namespace)
    reporter = namespace["ErrorReporter"]()
    queue = sq.Queue(engine, plugins=[reporter], load_entrypoints=False)

    @queue.task(queue="billing", max_attempts=1)
    def charge_card(payload, ctx):
        charge(payload)

    job_id = queue.enqueue("charge_card", {"card": CARD})
    run_worker(queue)
    [(exception, context)] = reporter.reported
    assert isinstance(exception, ConnectionError) and context == {"job_id": job_id, "task": "charge_card"}


def test_the_logging_plugin_logs_failures_with_the_bounded_traceback(billing, caplog):
    queue, _, _ = billing
    job_id = queue.enqueue("charge_card", {"card": CARD})
    with caplog.at_level(logging.INFO, logger="sqla_queue"):
        run_worker(queue)
    [record] = [r for r in caplog.records if getattr(r, "outcome", None) == "retried"]
    stored = queue.get_job(job_id).last_traceback
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert (record.job_id, record.task, record.queue, record.attempt) == (job_id, "charge_card", "billing", 1)
    assert record.traceback == stored and record.getMessage().endswith("\n" + stored)
    assert CARD not in record.getMessage() and PASSWORD not in record.getMessage()

    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["traceback"] == stored and "\n" not in entry["message"]
    assert entry["outcome"] == "retried" and entry["error"] == queue.get_job(job_id).last_error
