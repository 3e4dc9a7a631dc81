"""Guarded outcomes: lost claims change nothing, replays are recognised, retries are scheduled
on the database's clock, and exhausted attempts end in ``failed``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text

import sqla_queue as sq

LEASE = timedelta(seconds=30)


def _complete(queue, job):
    return queue.complete(job.id, job.claim_token)


def _retry(queue, job):
    return queue.retry(job.id, job.claim_token, error="stale worker's error")


def _fail(queue, job):
    return queue.fail(job.id, job.claim_token, error="stale worker's error")


STALE_OUTCOMES = [
    pytest.param(_complete, False, id="complete"),
    pytest.param(_retry, None, id="retry"),
    pytest.param(_fail, False, id="fail"),
]


@pytest.mark.parametrize(("outcome", "lost"), STALE_OUTCOMES)
def test_stale_worker_outcome_after_recovery_and_reclaim_is_lost_and_changes_nothing(
    queue, job_row, expire_lease, outcome, lost
):
    job_id = queue.enqueue("send_email", {"to": "a@example.com"})
    [stale] = queue.claim(worker_id="worker-1")
    expire_lease(job_id)

    assert queue.recover_expired(lease=LEASE) == [job_id]
    [current] = queue.claim(worker_id="worker-2")
    assert current.id == job_id
    assert current.claim_token != stale.claim_token
    before = job_row(job_id)

    assert outcome(queue, stale) is lost
    assert job_row(job_id) == before
    assert queue.complete(current.id, current.claim_token) is True


@pytest.mark.parametrize(("outcome", "lost"), STALE_OUTCOMES)
def test_stale_worker_outcome_after_recovery_alone_is_lost_and_changes_nothing(
    queue, job_row, expire_lease, outcome, lost
):
    job_id = queue.enqueue("send_email", {})
    [stale] = queue.claim(worker_id="worker-1")
    expire_lease(job_id)
    queue.recover_expired(lease=LEASE)
    before = job_row(job_id)
    assert before["status"] == "pending" and before["claim_token"] is None

    assert outcome(queue, stale) is lost
    assert job_row(job_id) == before


@pytest.mark.parametrize(("outcome", "lost"), STALE_OUTCOMES)
def test_wrong_token_is_a_lost_claim(queue, job_row, outcome, lost):
    job_id = queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w")
    before = job_row(job_id)
    forged = sq.ClaimedJob(
        id=job.id, task=job.task, payload=job.payload, attempts=job.attempts,
        max_attempts=job.max_attempts, claim_token="not-the-token", queue=job.queue,
    )

    assert outcome(queue, forged) is lost
    assert job_row(job_id) == before


def test_complete_replayed_with_the_same_token_returns_true_and_changes_nothing(queue, job_row):
    job_id = queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w")

    assert queue.complete(job.id, job.claim_token) is True
    after_first = job_row(job_id)
    assert queue.complete(job.id, job.claim_token) is True

    assert after_first["status"] == "completed"
    assert job_row(job_id) == after_first


def test_fail_replayed_with_the_same_token_returns_true_and_changes_nothing(queue, job_row):
    job_id = queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w")

    assert queue.fail(job.id, job.claim_token, error="first") is True
    after_first = job_row(job_id)
    assert queue.fail(job.id, job.claim_token, error="second") is True

    assert after_first["status"] == "failed"
    assert job_row(job_id) == after_first
    assert job_row(job_id)["last_error"] == "first"


def test_retry_replayed_with_the_same_token_returns_an_equal_outcome_and_changes_nothing(
    queue, job_row
):
    job_id = queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w")

    first = queue.retry(job.id, job.claim_token, error="first", delay=600)
    after_first = job_row(job_id)
    replay = queue.retry(job.id, job.claim_token, error="second", delay=5)

    assert first is not None and first.status is sq.JobStatus.PENDING
    assert replay == first
    assert job_row(job_id) == after_first


@pytest.mark.parametrize(
    "finish",
    [
        pytest.param(lambda q, j: q.complete(j.id, j.claim_token), id="completed"),
        pytest.param(lambda q, j: q.fail(j.id, j.claim_token, error="x"), id="failed"),
    ],
)
def test_a_finished_job_does_not_accept_another_kind_of_outcome(queue, job_row, finish):
    job_id = queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w")
    assert finish(queue, job) is True
    before = job_row(job_id)

    if before["status"] == "completed":
        assert queue.fail(job.id, job.claim_token, error="late") is False
        assert queue.retry(job.id, job.claim_token, error="late") is None
    else:
        assert queue.complete(job.id, job.claim_token) is False
    assert job_row(job_id) == before


def test_retry_with_a_delay_is_not_claimable_until_due_on_the_database_clock(
    queue, engine, make_due
):
    job_id = queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w")

    outcome = queue.retry(job.id, job.claim_token, error="partner API down", delay=3600)

    assert outcome.status is sq.JobStatus.PENDING
    with engine.connect() as conn:
        wait = conn.execute(
            text("SELECT run_at - clock_timestamp() FROM sqla_queue_jobs WHERE id = :id"),
            {"id": job_id},
        ).scalar_one()
    assert timedelta(minutes=50) < wait <= timedelta(hours=1)
    assert queue.claim(worker_id="w") == []

    make_due(job_id)
    [again] = queue.claim(worker_id="w")
    assert (again.id, again.attempts) == (job_id, 2)


def test_retry_at_an_explicit_run_at_is_not_claimable_until_then(queue, engine, make_due):
    job_id = queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w")
    with engine.connect() as conn:
        tomorrow = conn.execute(text("SELECT now() + interval '1 day'")).scalar_one()

    outcome = queue.retry(job.id, job.claim_token, error="later", run_at=tomorrow)

    assert outcome.run_at == tomorrow
    assert queue.claim(worker_id="w") == []
    make_due(job_id)
    assert [j.id for j in queue.claim(worker_id="w")] == [job_id]


def test_retry_without_delay_is_claimable_at_once(queue):
    job_id = queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w")
    queue.retry(job.id, job.claim_token, error="flaky")
    assert [j.id for j in queue.claim(worker_id="w")] == [job_id]


def test_exhausting_attempts_ends_in_failed_with_the_last_error_kept(queue, job_row):
    job_id = queue.enqueue("resize", {"image": 1})  # max_attempts=2
    [first] = queue.claim("images", worker_id="w")
    assert queue.retry(first.id, first.claim_token, error="first error").status is sq.JobStatus.PENDING

    [second] = queue.claim("images", worker_id="w")
    assert second.is_last_attempt
    outcome = queue.retry(second.id, second.claim_token, error="second error", delay=60)

    assert outcome.status is sq.JobStatus.FAILED
    assert (outcome.attempts, outcome.max_attempts) == (2, 2)
    row = job_row(job_id)
    assert (row["status"], row["attempts"], row["last_error"]) == ("failed", 2, "second error")
    assert queue.claim("images", worker_id="w") == []


def test_claim_sets_running_state_and_clears_last_error(queue, job_row, expire_lease):
    job_id = queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w")
    queue.retry(job.id, job.claim_token, error="boom")
    assert job_row(job_id)["last_error"] == "boom"

    [again] = queue.claim(worker_id="worker-7")

    row = job_row(job_id)
    assert row["status"] == "running"
    assert row["attempts"] == 2
    assert row["locked_by"] == "worker-7"
    assert row["locked_at"] is not None
    assert row["claim_token"] == again.claim_token != job.claim_token
    assert row["last_error"] is None


def test_claim_returns_only_due_jobs_of_its_own_queue(queue):
    ids = queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(3)])
    queue.enqueue("resize", {})  # queue "images"
    queue.enqueue("send_email", {}, delay=3600)  # not due yet

    claimed = queue.claim(worker_id="w", limit=10)

    assert [j.id for j in claimed] == ids
    assert queue.claim(worker_id="w", limit=10) == []


def test_claim_order_prefers_the_oldest_run_at(queue, run_sql):
    ids = queue.enqueue_many([{"task": "send_email", "payload": {}} for _ in range(3)])
    run_sql("UPDATE sqla_queue_jobs SET run_at = now() - interval '1 hour' WHERE id = :id", id=ids[2])

    assert [j.id for j in queue.claim(worker_id="w")] == [ids[2]]
    assert [j.id for j in queue.claim(worker_id="w")] == [ids[0]]


def test_a_batch_claim_shares_one_token_but_each_outcome_is_per_job(queue, job_row):
    ids = queue.enqueue_many([{"task": "send_email", "payload": {}} for _ in range(3)])
    jobs = queue.claim(worker_id="w", limit=3)
    assert len({j.claim_token for j in jobs}) == 1

    assert queue.complete(jobs[0].id, jobs[0].claim_token) is True

    assert [job_row(i)["status"] for i in ids] == ["completed", "running", "running"]
