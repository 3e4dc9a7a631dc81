"""Operator actions from Python: list jobs with paging, retry a failed job now, cancel a job (its
own file: test_cancel.py); none of them can fight a claim, and every bad input writes nothing."""

from __future__ import annotations

from datetime import datetime

import pytest
from sqlalchemy import text

import sqla_queue as sq


@pytest.fixture
def mixed(ops_queue):
    """Ids by state: 3 pending send_email, 2 pending resize, 1 running, 1 completed, 1 failed."""
    ops_queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(3)])
    done, running, failed = (ops_queue.enqueue("send_email", {}, queue="side") for _ in range(3))
    jobs = {job.id: job for job in ops_queue.claim("side", worker_id="w", limit=3)}
    ops_queue.complete(done, jobs[done].claim_token)
    ops_queue.fail(failed, jobs[failed].claim_token, error="bad address")
    ops_queue.enqueue_many([{"task": "resize", "payload": {}}] * 2)
    return {"done": done, "running": running, "failed": failed, "claims": jobs}


def ids(page):
    return [job.id for job in page.jobs]


def test_list_filters_by_status_queue_and_task_newest_first(ops_queue, mixed):
    assert ids(ops_queue.list_jobs()) == [8, 7, 6, 5, 4, 3, 2, 1]
    assert ids(ops_queue.list_jobs(status="pending")) == [8, 7, 3, 2, 1]
    assert ids(ops_queue.list_jobs(status=sq.JobStatus.FAILED)) == [mixed["failed"]]
    assert ids(ops_queue.list_jobs(queue="side")) == [6, 5, 4]
    assert ids(ops_queue.list_jobs(task="resize", status="pending", queue="images")) == [8, 7]
    [failed] = ops_queue.list_jobs(status="failed").jobs
    assert (failed.last_error, failed.queue, failed.status) == ("bad address", "side", sq.JobStatus.FAILED)


def test_pages_follow_each_other_without_gaps_or_repeats(ops_queue, mixed):
    first = ops_queue.list_jobs(limit=3)
    second = ops_queue.list_jobs(limit=3, before_id=first.next_before)
    last = ops_queue.list_jobs(limit=3, before_id=second.next_before)
    assert (ids(first), ids(second), ids(last)) == ([8, 7, 6], [5, 4, 3], [2, 1])
    assert (first.next_before, second.next_before, last.next_before) == (6, 3, None)


def test_retry_now_makes_a_failed_job_due_with_an_attempt_left(ops_queue, mixed):
    view = ops_queue.retry_now(mixed["failed"])

    assert view.status is sq.JobStatus.PENDING and view.failed_at is None
    assert (view.attempts, view.max_attempts) == (1, 5)
    assert view.run_at <= datetime.now(view.run_at.tzinfo)
    [job] = ops_queue.claim("side", worker_id="w2")
    assert job.id == mixed["failed"] and job.attempts == 2
    assert ops_queue.complete(job.id, job.claim_token)


def test_retry_now_gives_an_exhausted_job_exactly_one_more_attempt(ops_queue):
    job_id = ops_queue.enqueue("resize", {}, max_attempts=1)
    [job] = ops_queue.claim("images", worker_id="w")
    ops_queue.retry(job.id, job.claim_token, error="disk full")  # the last attempt: failed

    view = ops_queue.retry_now(job_id)

    assert (view.attempts, view.max_attempts, view.last_error) == (1, 2, "disk full")
    [again] = ops_queue.claim("images", worker_id="w")
    assert again.is_last_attempt


@pytest.mark.parametrize("state", ["done", "running"])
def test_only_failed_jobs_can_be_retried_now(ops_queue, mixed, table_rows, state):
    before = table_rows()
    status = "completed" if state == "done" else "running"
    with pytest.raises(sq.errors.JobStateError, match=f"job {mixed[state]} is {status}: only failed jobs"):
        ops_queue.retry_now(mixed[state])
    assert table_rows() == before


def test_retry_now_will_not_duplicate_an_active_job_with_the_same_key(ops_queue, table_rows):
    first = ops_queue.enqueue("send_email", {}, idempotency_key="receipt-7")
    [job] = ops_queue.claim(worker_id="w")
    ops_queue.fail(job.id, job.claim_token, error="smtp down")
    second = ops_queue.enqueue("send_email", {}, idempotency_key="receipt-7")  # the key is free again
    before = table_rows()

    with pytest.raises(sq.errors.JobStateError, match=f"held by active job {second}"):
        ops_queue.retry_now(first)
    assert table_rows() == before


@pytest.mark.parametrize("action", ["cancel", "retry_now"])
def test_a_row_held_by_another_transaction_is_refused_not_waited_for(ops_queue, mixed, engine, action):
    target = 1 if action == "cancel" else mixed["failed"]
    with engine.connect() as holder:  # e.g. a claim in flight, or an operator's open session
        holder.execute(text("SELECT id FROM sqla_queue_jobs WHERE id = :id FOR UPDATE"), {"id": target})
        with pytest.raises(sq.errors.JobStateError, match="locked by another transaction right now; try again"):
            getattr(ops_queue, action)(target)
        holder.rollback()
    getattr(ops_queue, action)(target)  # released: now it goes through


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda q: q.cancel(999), sq.InvalidInputError, "job 999 does not exist"),
        (lambda q: q.retry_now(999), sq.InvalidInputError, "job 999 does not exist"),
        (lambda q: q.cancel("3"), sq.InvalidInputError, "job_id must be an integer, got str"),
        (lambda q: q.retry_now(True), sq.InvalidInputError, "job_id must be an integer, got bool"),
        (lambda q: q.cancel(0), sq.InvalidInputError, "job_id must be a positive integer, got 0"),
        (lambda q: q.list_jobs(status="done"), sq.InvalidInputError,
         "unknown status 'done'; expected one of waiting, pending, running, completed, failed, cancelled"),
        (lambda q: q.list_jobs(limit=0), sq.InvalidInputError, "limit must be a positive integer"),
        (lambda q: q.list_jobs(limit=5000), sq.InvalidInputError, "limit must be at most 1000"),
        (lambda q: q.list_jobs(before_id=-4), sq.InvalidInputError, "before_id must be a positive integer"),
        (lambda q: q.list_jobs(queue=""), sq.InvalidInputError, "queue must not be empty"),
        (lambda q: q.list_jobs(task=" x"), sq.InvalidInputError, "task 'x' has leading or trailing"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(ops_queue, mixed, table_rows, call, error, message):
    before = table_rows()
    with pytest.raises(error, match=message):
        call(ops_queue)
    assert table_rows() == before


