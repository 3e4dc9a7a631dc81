"""Lease recovery: expired claims go back to pending, or to failed on their last attempt."""

from __future__ import annotations

from datetime import timedelta

import sqla_queue as sq

LEASE = timedelta(minutes=5)


def test_expired_job_with_attempts_left_returns_to_pending(queue, job_row, expire_lease):
    job_id = queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w")
    expire_lease(job_id)

    assert queue.recover_expired(lease=LEASE) == [job_id]

    row = job_row(job_id)
    assert row["status"] == "pending"
    assert row["last_error"] == "claim lease expired"
    assert (row["claim_token"], row["locked_at"], row["locked_by"]) == (None, None, None)
    assert row["attempts"] == 1  # the expired attempt counts
    [again] = queue.claim(worker_id="w2")  # due at once
    assert (again.id, again.attempts) == (job_id, 2)


def test_expired_job_on_its_last_attempt_fails(queue, job_row, expire_lease):
    job_id = queue.enqueue("resize", {})  # max_attempts=2
    [first] = queue.claim("images", worker_id="w")
    queue.retry(first.id, first.claim_token, error="boom")
    [last] = queue.claim("images", worker_id="w")
    expire_lease(job_id)

    assert queue.recover_expired(lease=LEASE) == [job_id]

    row = job_row(job_id)
    assert row["status"] == "failed"
    assert row["last_error"] == "claim lease expired on the last attempt"
    assert row["claim_token"] is None
    assert queue.complete(last.id, last.claim_token) is False
    assert queue.claim("images", worker_id="w") == []


def test_job_inside_its_lease_is_untouched(queue, job_row, expire_lease):
    job_id = queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w", lease=timedelta(hours=1))
    expire_lease(job_id, by="1 minute")
    before = job_row(job_id)

    assert queue.recover_expired(lease=timedelta(hours=1)) == []

    assert job_row(job_id) == before
    assert queue.complete(job.id, job.claim_token) is True


def test_the_claim_stores_the_end_of_the_claiming_workers_lease(queue, job_row):
    job_id = queue.enqueue("send_email", {})
    queue.claim(worker_id="w", lease=timedelta(seconds=30))

    row = job_row(job_id)
    assert abs(row["lease_expires_at"] - row["locked_at"] - timedelta(seconds=30)) < timedelta(seconds=1)


def test_a_job_inside_its_holders_long_lease_is_not_taken_by_a_shorter_recovery_lease(queue, job_row, expire_lease):
    """The defect: recovery judged by the recoverer's lease, so `sqla-queue recover` (60 s) or a
    worker deployed with a shorter ``--lease`` took back jobs their holder still held."""
    job_id = queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="long-lease", lease=timedelta(seconds=30))
    expire_lease(job_id, by="5 seconds")  # claimed 5 s ago: 25 s of its lease left
    before = job_row(job_id)

    assert queue.recover_expired(lease=1) == []
    assert queue.recover_expired(lease=timedelta(microseconds=1)) == []

    assert job_row(job_id) == before
    assert queue.complete(job.id, job.claim_token) is True


def test_a_job_whose_own_short_lease_ran_out_is_taken_back_whatever_the_recovery_lease(queue, job_row, expire_lease):
    job_id = queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="short-lease", lease=timedelta(seconds=1))
    expire_lease(job_id, by="2 seconds")  # its lease ended a second ago

    assert queue.recover_expired(lease=timedelta(hours=1)) == [job_id]

    assert job_row(job_id)["lease_expires_at"] is None
    assert queue.complete(job.id, job.claim_token) is False


def test_a_row_claimed_before_the_lease_end_column_falls_back_to_the_given_lease(queue, run_sql, expire_lease):
    """Running rows from before revision sqlaq_0008 have no lease end: the lease recovery is
    given decides, from ``locked_at``, on the database clock."""
    job_id = queue.enqueue("send_email", {})
    queue.claim(worker_id="old-worker", lease=timedelta(hours=5))
    run_sql("UPDATE sqla_queue_jobs SET lease_expires_at = NULL WHERE id = :id", id=job_id)
    expire_lease(job_id, by="10 minutes")

    assert queue.recover_expired(lease=timedelta(minutes=11)) == []
    assert queue.recover_expired(lease=timedelta(minutes=9)) == [job_id]


def test_a_renewal_restarts_the_claims_own_lease_unless_told_another(queue, job_row, expire_lease):
    job_id = queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w", lease=timedelta(seconds=30))
    expire_lease(job_id, by="1 minute")  # the holder stalled: its lease ended 30 s ago

    assert queue.heartbeat([job]) == {job_id}  # ... and came back in time to renew it
    row = job_row(job_id)
    assert abs(row["lease_expires_at"] - row["locked_at"] - timedelta(seconds=30)) < timedelta(seconds=1)
    assert queue.recover_expired(lease=timedelta(microseconds=1)) == []

    assert queue.renew([job], lease=timedelta(hours=2)) == {job_id: False}
    row = job_row(job_id)
    assert abs(row["lease_expires_at"] - row["locked_at"] - timedelta(hours=2)) < timedelta(seconds=1)


def test_pending_and_finished_jobs_are_never_recovered(queue, job_row, run_sql):
    pending, done, failed = queue.enqueue_many([{"task": "send_email", "payload": {}}] * 3)
    jobs = {j.id: j for j in queue.claim(worker_id="w", limit=3)}
    queue.retry(pending, jobs[pending].claim_token, error="x")
    queue.complete(done, jobs[done].claim_token)
    queue.fail(failed, jobs[failed].claim_token, error="x")
    run_sql("UPDATE sqla_queue_jobs SET locked_at = clock_timestamp() - interval '1 day', "
            "run_at = clock_timestamp() - interval '1 day'")
    before = [job_row(i) for i in (pending, done, failed)]

    assert queue.recover_expired(lease=LEASE) == []
    assert [job_row(i) for i in (pending, done, failed)] == before


def test_recovery_is_bounded_by_limit_oldest_lease_first(queue, run_sql):
    ids = queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(5)])
    queue.claim(worker_id="w", limit=5)
    for age, job_id in enumerate(ids):
        run_sql("UPDATE sqla_queue_jobs SET locked_at = clock_timestamp() - make_interval(hours => :h), "
                "lease_expires_at = clock_timestamp() - make_interval(hours => :h) WHERE id = :id",
                h=10 - age, id=job_id)

    assert queue.recover_expired(lease=LEASE, limit=2) == ids[:2]
    assert queue.recover_expired(lease=LEASE, limit=2) == ids[2:4]
    assert queue.recover_expired(lease=LEASE, limit=2) == ids[4:]
    assert queue.recover_expired(lease=LEASE, limit=2) == []


def test_limit_applies_to_each_kind_of_recovery(queue, expire_lease):
    requeue = queue.enqueue_many([{"task": "send_email", "payload": {}}] * 3)
    exhausted = queue.enqueue_many([{"task": "send_email", "payload": {}, "max_attempts": 1}] * 3)
    queue.claim(worker_id="w", limit=6)
    for job_id in requeue + exhausted:
        expire_lease(job_id)

    recovered = queue.recover_expired(lease=LEASE, limit=2)

    assert len(set(recovered) & set(requeue)) == 2
    assert len(set(recovered) & set(exhausted)) == 2
    assert len(queue.recover_expired(lease=LEASE, limit=2)) == 2


def test_lease_is_measured_on_the_database_clock(queue, expire_lease):
    job_id = queue.enqueue("send_email", {})
    queue.claim(worker_id="w", lease=timedelta(minutes=10, seconds=30))
    expire_lease(job_id, by="10 minutes")

    assert queue.recover_expired(lease=LEASE) == []
    expire_lease(job_id, by="11 minutes")
    assert queue.recover_expired(lease=LEASE) == [job_id]


def test_lease_accepts_seconds(queue, expire_lease):
    job_id = queue.enqueue("send_email", {})
    queue.claim(worker_id="w")
    expire_lease(job_id, by="10 minutes")

    assert queue.recover_expired(lease=60.0) == [job_id]
    assert queue.get_job(job_id).status is sq.JobStatus.PENDING
