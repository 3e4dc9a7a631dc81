"""`sqla_queue.testing.run_job`: one handler run with a real `JobContext`, without a worker."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

import sqla_queue as sq
from sqla_queue.testing import enqueued, run_job


def test_runs_the_handler_with_a_real_context_and_records_the_outcome(queue, calls, job_row):
    ran = run_job(queue, "send_receipt", {"order_id": 4})

    assert (ran.outcome, ran.result, ran.error) == ("completed", {"sent": 4}, None)
    [(_, payload, ctx)] = calls
    assert isinstance(ctx, sq.JobContext) and payload == {"order_id": 4}
    assert (ctx.job_id, ctx.attempt, ctx.max_attempts, ctx.queue, ctx.task, ctx.priority, ctx.scheduled_at) == (
        ran.job.id, 1, 5, "mail", "send_receipt", 0, None)
    assert ctx.idempotency_key == f"sqla_queue-job-{ran.job.id}"
    row = job_row(ran.job.id)
    assert (row.status, row.attempts, row.result) == ("completed", 1, {"sent": 4})


def test_the_context_can_be_chosen(queue, calls, job_row):
    tick = datetime(2026, 1, 1, 9, tzinfo=timezone.utc)
    ran = run_job(queue, queue.get_task("resize").handler, {"n": 1}, attempt=3, max_attempts=4, priority=7,
                  queue="bulk", idempotency_key="resize-1", scheduled_at=tick)

    [(_, _, ctx)] = calls
    assert (ctx.attempt, ctx.max_attempts, ctx.priority, ctx.queue, ctx.idempotency_key, ctx.scheduled_at) == (
        3, 4, 7, "bulk", "resize-1", tick)
    row = job_row(ran.job.id)
    assert (row.status, row.attempts, row.queue_name, row.scheduled_at) == ("completed", 3, "bulk", tick)


def test_a_handler_exception_is_recorded_then_raised(queue, job_row):
    with pytest.raises(RuntimeError, match="attempt 1 fails"):
        run_job(queue, "flaky", {"succeed_on": 2})
    [row] = [job_row(1)]
    assert (row.status, row.attempts, row.last_error) == ("pending", 1, "RuntimeError: attempt 1 fails")
    assert row.last_traceback and "flaky" in row.last_traceback

    with pytest.raises(RuntimeError, match="attempt 3 fails"):
        run_job(queue, "flaky", {"succeed_on": 9}, attempt=3)  # the last one
    assert job_row(2).status == "failed"


def test_a_snooze_is_an_outcome_not_an_error(queue, job_row):
    ran = run_job(queue, "remind", {})
    assert ran.outcome == "snoozed" and isinstance(ran.error, sq.Snooze)
    assert (job_row(ran.job.id).status, job_row(ran.job.id).snoozes) == ("pending", 1)


def test_the_handler_transaction_commits_with_the_completion(queue, effects, job_row):
    ran = run_job(queue, "record", {"note": "one"})
    assert (ran.outcome, job_row(ran.job.id).result) == ("completed", "recorded")
    assert effects() == [(ran.job.id, "one")]
    with pytest.raises(RuntimeError, match="inside the block"):
        run_job(queue, "record", {"note": "two", "fail": True})
    assert effects() == [(ran.job.id, "one")]


def test_an_async_handler_runs_to_its_end(queue):
    @queue.task(name="notify")
    async def notify(payload, ctx):
        return payload["n"] * 2

    assert run_job(queue, "notify", {"n": 21}).result == 42


def test_only_the_new_job_runs(queue):
    other = queue.enqueue("send_receipt", {"order_id": 1})
    run_job(queue, "send_receipt", {"order_id": 2})
    assert [job.id for job in enqueued(queue)] == [other]


@pytest.mark.parametrize(("context", "error", "message"), [
    ({"attempts": 2}, TypeError, "run_job\\(\\) got unexpected context 'attempts'; allowed: attempt, "),
    ({"job_id": 1, "colour": "red"}, TypeError, "'colour', 'job_id'"),
    ({"attempt": 0}, sq.InvalidInputError, "attempt must be a positive int, got 0"),
    ({"attempt": 6}, sq.InvalidInputError, "attempt 6 is past max_attempts 5"),
    ({"attempt": 3, "max_attempts": 2}, sq.InvalidInputError, "attempt 3 is past max_attempts 2"),
    ({"scheduled_at": datetime(2026, 1, 1)}, sq.InvalidInputError, "timezone-aware"),
    ({"priority": 10**6}, sq.InvalidInputError, "priority"),
])
def test_bad_context_is_refused_before_anything_is_written(queue, context, error, message):
    with pytest.raises(error, match=message):
        run_job(queue, "send_receipt", {"order_id": 1}, **context)
    assert enqueued(queue) == [] and queue.list_jobs().jobs == []


def test_unknown_task_and_held_key_are_refused(queue):
    with pytest.raises(sq.UnknownTaskError, match="nope"):
        run_job(queue, "nope", {})
    holder = queue.enqueue("send_receipt", {"order_id": 1}, idempotency_key="order-1")
    with pytest.raises(sq.InvalidInputError, match=f"job #{holder} is active and holds idempotency key 'order-1'"):
        run_job(queue, "send_receipt", {"order_id": 2}, idempotency_key="order-1")
    assert [job.id for job in enqueued(queue)] == [holder]
