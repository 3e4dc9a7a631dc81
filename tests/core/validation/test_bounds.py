"""Bounds said in Python, before PostgreSQL or the int-to-text limit says something worse
(D9, D10, D13, D14, D15 of the adversarial review): each bad value is a clear error naming
what was wrong, and nothing is written."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text

import sqla_queue as sq
from sqla_queue.testing import drain


def _count(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM sqla_queue_jobs")).scalar_one()


@pytest.mark.parametrize("delay", [1e15, 8e13, timedelta.max, timedelta(days=36_526)])
def test_an_absurd_delay_is_refused_in_python(queue, engine, delay):
    with pytest.raises(sq.InvalidInputError, match="delay of .* is over the limit of 100 years"):
        queue.enqueue("send_email", {}, delay=delay)
    assert _count(engine) == 0


def test_a_century_is_still_a_delay(queue):
    job_id = queue.enqueue("send_email", {}, delay=timedelta(days=36_524))
    assert queue.get_job(job_id).status is sq.JobStatus.PENDING


@pytest.mark.parametrize("window", [1e12, timedelta.max])
def test_an_absurd_stats_window_is_refused(queue, window):
    with pytest.raises(sq.InvalidInputError, match="window of .* over the limit"):
        queue.stats(window=window)


def test_an_absurd_snooze_fails_the_attempt_with_its_own_reason(queue):
    @queue.task(max_attempts=1)
    def sleepy(payload, ctx):
        return ctx.snooze(1e13)

    job_id = queue.enqueue(sleepy, {})
    assert [r.outcome for r in drain(queue)] == ["failed"]
    assert "snooze delay of 1e+13 seconds is over the limit of 100 years" in queue.get_job(job_id).last_error


class EonBackoff:
    @sq.hookimpl
    def sqla_queue_retry_delay(self):
        return timedelta(days=999_999_999)


def test_a_backoff_answering_eons_is_a_plugin_error_and_the_job_still_retries(make_queue, clean_jobs, caplog):
    queue = make_queue(plugins=[EonBackoff()])

    @queue.task(max_attempts=2, name="flaky")
    def flaky(payload, ctx):
        raise RuntimeError("try again")

    job_id = queue.enqueue(flaky, {})
    assert [r.outcome for r in drain(queue, until_empty=False)] == ["retried"]  # the retry may be due at once
    assert "EonBackoff" in caplog.text and "a timedelta from 0 to 100 years" in caplog.text
    assert queue.get_job(job_id).run_at is not None


def test_a_huge_integer_is_named_as_such(queue, engine):
    with pytest.raises(sq.PayloadError, match="an integer of more than 4,300 digits"):
        queue.enqueue("send_email", {"x": 10**5000})
    assert _count(engine) == 0


@pytest.mark.parametrize("where", ["enqueue", "task", "periodic"])
def test_a_queue_name_with_a_comma_is_refused_where_jobs_are_written(queue, engine, where):
    with pytest.raises((sq.InvalidInputError, sq.ConfigurationError), match="contains a comma"):
        if where == "enqueue":
            queue.enqueue("send_email", {}, queue="a,b")
        elif where == "task":
            queue.task(name="split", queue="a,b")(lambda payload, ctx: None)
        else:
            queue.periodic(queue.get_task("send_email"), every=60, queue="a,b", name="comma")
    assert _count(engine) == 0


@pytest.mark.parametrize("worker_id", ["host\x00:1", "w" * 10_000, ""])
def test_a_bad_worker_id_is_refused_when_the_worker_is_built(queue, worker_id):
    with pytest.raises(sq.ConfigurationError, match="worker_id"):
        queue.worker(worker_id=worker_id)


@pytest.mark.parametrize("every", [1e-6, 0.5, timedelta(milliseconds=999)])
def test_an_interval_under_a_second_is_refused(queue, every):
    with pytest.raises(sq.ConfigurationError, match="every= must be at least 1 second"):
        queue.periodic(queue.get_task("send_email"), every=every, backfill=True, name="flood")
    assert queue.schedules == []
