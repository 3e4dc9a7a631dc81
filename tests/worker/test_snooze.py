"""Snooze: a handler puts its job back to pending for later, without spending an attempt.

``raise sq.Snooze(delay)`` or ``return ctx.snooze(delay)``: pending at the database's now +
delay, ``attempts`` unchanged, ``snoozes`` + 1, a `JobSnoozed` event; over the task's
``max_snoozes`` that attempt fails. A snooze is an outcome like any other, fenced by the claim
token: a job taken back from the worker (lease expired, recovered) is not moved by it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy import Engine, text

import sqla_queue as sq
from job_fixtures import EventRecorder
from sqla_queue.types import JobSnoozed

FAST = {"poll_interval": 0.05, "concurrency": 2}


@pytest.fixture
def queue(make_queue, clean_jobs: None, recorder: EventRecorder) -> sq.Queue:
    return make_queue(tasks=False, plugins=[recorder])


@pytest.fixture
def db_now(engine: Engine):
    def now():
        with engine.connect() as conn:
            return conn.execute(text("SELECT clock_timestamp()")).scalar_one()

    return now


@pytest.fixture(params=["raise Snooze", "return ctx.snooze", "async raise", "async return"])
def snoozing(request):
    """A handler body that snoozes `delay` (seconds or a timedelta), in each of the four ways."""
    way = request.param

    def make(delay):
        if way == "raise Snooze":
            def handler(payload, ctx):
                raise sq.Snooze(delay)
        elif way == "return ctx.snooze":
            def handler(payload, ctx):
                return ctx.snooze(delay)
        elif way == "async raise":
            async def handler(payload, ctx):
                await asyncio.sleep(0)
                raise sq.Snooze(delay)
        else:
            async def handler(payload, ctx):
                await asyncio.sleep(0)
                return ctx.snooze(delay)
        return handler

    return make


@pytest.mark.parametrize("delay", [30, timedelta(minutes=5)], ids=["30s", "5min"])
def test_a_snooze_moves_run_at_and_spends_no_attempt(queue, recorder, snoozing, delay, db_now):
    queue.task(name="later", max_attempts=3)(snoozing(delay))
    job_id = queue.enqueue("later", {})
    seconds = delay if isinstance(delay, timedelta) else timedelta(seconds=delay)

    before = db_now()
    summary = queue.worker(**FAST).run(until_empty=True)
    after = db_now()

    job = queue.get_job(job_id)
    assert (job.status, job.attempts, job.snoozes, job.result) == (sq.JobStatus.PENDING, 0, 1, None)
    assert before + seconds <= job.run_at <= after + seconds
    assert (summary.completed, summary.failed, summary.retried) == (0, 0, 0)
    [event] = recorder.of("snoozed")
    assert isinstance(event, JobSnoozed)
    # `attempt`: attempts spent so far, the snoozed run's given back (docs/reference/events.md)
    assert (event.job_id, event.queue, event.task, event.attempt, event.snoozes) == \
        (job_id, "default", "later", 0, 1)
    assert event.run_at == job.run_at
    assert "retried" not in recorder.names and "failed" not in recorder.names


def test_a_snoozed_job_runs_again_when_due_with_its_attempt_unspent(queue, make_due):
    runs: list[int] = []

    def handler(payload, ctx):
        runs.append(ctx.attempt)
        if len(runs) == 1:
            raise sq.Snooze(3600)
        return {"attempt": ctx.attempt}

    queue.task(name="poll_export", max_attempts=1)(handler)
    job_id = queue.enqueue("poll_export", {})
    queue.worker(**FAST).run(until_empty=True)
    make_due(job_id)
    queue.worker(**FAST).run(until_empty=True)

    # max_attempts=1: the second run happened only because the snooze spent no attempt.
    job = queue.get_job(job_id)
    assert runs == [1, 1]
    assert (job.status, job.attempts, job.snoozes, job.result) == \
        (sq.JobStatus.COMPLETED, 1, 1, {"attempt": 1})


def test_over_max_snoozes_the_attempt_fails(queue, recorder, make_due):
    queue.task(name="stubborn", max_attempts=1, max_snoozes=2)(lambda payload, ctx: ctx.snooze(3600))
    job_id = queue.enqueue("stubborn", {})

    for _ in range(3):
        queue.worker(**FAST).run(until_empty=True)
        make_due(job_id)

    job = queue.get_job(job_id)
    assert (job.status, job.snoozes, job.attempts) == (sq.JobStatus.FAILED, 2, 1)
    assert "snooze" in job.last_error and "2" in job.last_error
    assert len(recorder.of("snoozed")) == 2
    assert len(recorder.of("failed")) == 1


def test_max_snoozes_defaults_to_100_and_is_validated(queue):
    queue.task(name="default_limit")(lambda payload, ctx: None)
    assert queue.get_task("default_limit").max_snoozes == 100
    for bad in (-1, "3", 1.5, True):
        with pytest.raises(sq.ConfigurationError, match="max_snoozes"):
            queue.task(name=f"bad_{bad!r}", max_snoozes=bad)(lambda payload, ctx: None)


@pytest.mark.parametrize("bad", [-1, "soon", float("nan"), None])
def test_a_bad_snooze_delay_fails_that_attempt_with_an_error_naming_it(queue, bad):
    """Like any mistake in a handler: the attempt fails (and is retried), the job is not moved."""
    queue.task(name="bad_snooze", max_attempts=1)(lambda payload, ctx: ctx.snooze(bad))
    job_id = queue.enqueue("bad_snooze", {})

    queue.worker(**FAST).run(until_empty=True)

    view = queue.get_job(job_id)
    assert (view.status, view.snoozes) == (sq.JobStatus.FAILED, 0)
    assert view.last_error.startswith("InvalidInputError: snooze delay must be")


@pytest.mark.parametrize("bad", [-1, "soon", float("nan"), None])
def test_queue_snooze_refuses_a_bad_delay_before_writing(queue, bad):
    queue.task(name="t")(lambda payload, ctx: None)
    job_id = queue.enqueue("t", {})
    (job,) = queue.claim(worker_id="w")
    with pytest.raises(sq.InvalidInputError, match="snooze delay"):
        queue.snooze(job, bad)
    assert queue.get_job(job_id).status is sq.JobStatus.RUNNING


def test_a_stale_snooze_is_refused(queue, recorder, expire_lease):
    """The worker loses the claim while the handler runs (its lease expired and recovery took
    the job back); the handler's snooze then moves nothing and is reported as a lost claim."""

    def handler(payload, ctx):
        if ctx.attempt == 1:
            expire_lease(ctx.job_id)
            assert queue.recover_expired(lease=timedelta(seconds=60)) == [ctx.job_id]
            raise sq.Snooze(3600)
        return "second attempt"

    queue.task(name="slow_snooze", max_attempts=3)(handler)
    job_id = queue.enqueue("slow_snooze", {})

    summary = queue.worker(lease=timedelta(seconds=60), **FAST).run(until_empty=True)

    job = queue.get_job(job_id)
    # Had the stale snooze been applied, the job would be pending an hour from now.
    assert (job.status, job.snoozes, job.attempts, job.result) == \
        (sq.JobStatus.COMPLETED, 0, 2, "second attempt")
    assert recorder.of("snoozed") == []
    assert job_id in {event.job_id for event in recorder.of("lost_claim")}
    assert summary.lost == 1
