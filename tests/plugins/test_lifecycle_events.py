"""Lifecycle hooks fire once per event with the fields docs/reference/events.md lists."""

from __future__ import annotations

from datetime import timedelta

import sqla_queue as sq


def test_enqueue_fires_enqueued_with_the_deduplicated_flag(recorded_queue, recorder):
    first = recorded_queue.enqueue("send_email", {}, idempotency_key="k")
    second = recorded_queue.enqueue("send_email", {}, idempotency_key="k")

    events = recorder.of("enqueued")
    assert [(e.job_id, e.deduplicated) for e in events] == [(first, False), (second, True)]
    assert {(e.queue, e.task) for e in events} == {("default", "send_email")}


def test_claim_fires_claimed_per_job_and_empty_claim_when_nothing_is_due(recorded_queue, recorder):
    ids = recorded_queue.enqueue_many([{"task": "resize", "payload": {}}] * 2)

    recorded_queue.claim("images", worker_id="worker-1", limit=5)
    recorded_queue.claim("images", worker_id="worker-1", limit=5)

    claimed = recorder.of("claimed")
    assert sorted(e.job_id for e in claimed) == ids
    assert {(e.queue, e.task, e.attempt, e.worker_id) for e in claimed} == {
        ("images", "resize", 1, "worker-1")
    }
    assert all(e.queue_wait is not None and e.queue_wait >= timedelta(0) for e in claimed)
    [empty] = recorder.of("empty_claim")
    assert (empty.queue, empty.worker_id, empty.limit) == ("images", "worker-1", 5)


def test_complete_fires_completed_with_a_duration(recorded_queue, recorder):
    job_id = recorded_queue.enqueue("send_email", {})
    [job] = recorded_queue.claim(worker_id="w")

    recorded_queue.complete(job.id, job.claim_token)

    [event] = recorder.of("completed")
    assert (event.job_id, event.queue, event.task, event.attempt) == (job_id, "default", "send_email", 1)
    assert event.duration is not None and event.duration >= timedelta(0)


def test_retry_fires_retried_then_exhaustion_fires_failed(recorded_queue, recorder):
    job_id = recorded_queue.enqueue("resize", {})  # max_attempts=2
    [first] = recorded_queue.claim("images", worker_id="w")
    outcome = recorded_queue.retry(first.id, first.claim_token, error="flaky")
    [last] = recorded_queue.claim("images", worker_id="w")
    recorded_queue.retry(last.id, last.claim_token, error="still flaky")

    [retried] = recorder.of("retried")
    assert (retried.job_id, retried.attempt, retried.error, retried.run_at) == (
        job_id, 1, "flaky", outcome.run_at,
    )
    [failed] = recorder.of("failed")
    assert (failed.job_id, failed.attempt, failed.error) == (job_id, 2, "still flaky")


def test_fail_fires_failed(recorded_queue, recorder):
    job_id = recorded_queue.enqueue("send_email", {})
    [job] = recorded_queue.claim(worker_id="w")

    recorded_queue.fail(job.id, job.claim_token, error=ValueError("bad address"))

    [event] = recorder.of("failed")
    assert (event.job_id, event.queue, event.task, event.attempt) == (job_id, "default", "send_email", 1)
    assert event.error == "ValueError: bad address"
    assert recorder.of("retried") == []


def test_recovery_fires_recovered_with_the_new_status(recorded_queue, recorder, expire_lease):
    requeued = recorded_queue.enqueue("send_email", {})
    exhausted = recorded_queue.enqueue("send_email", {}, max_attempts=1)
    recorded_queue.claim(worker_id="w", limit=2)
    expire_lease(requeued)
    expire_lease(exhausted)

    recorded_queue.recover_expired(lease=timedelta(minutes=1))

    events = {e.job_id: e for e in recorder.of("recovered")}
    assert events[requeued].status is sq.JobStatus.PENDING
    assert events[exhausted].status is sq.JobStatus.FAILED
    assert len(recorder.of("recovered")) == 2


def test_lost_claim_fires_with_a_reason_and_the_operation(recorded_queue, recorder, expire_lease):
    job_id = recorded_queue.enqueue("send_email", {})
    [stale] = recorded_queue.claim(worker_id="w1")
    expire_lease(job_id)
    recorded_queue.recover_expired(lease=timedelta(minutes=1))

    recorded_queue.complete(stale.id, stale.claim_token)
    recorded_queue.claim(worker_id="w2")
    recorded_queue.fail(stale.id, stale.claim_token, error="late")

    first, second = recorder.of("lost_claim")
    assert (first.job_id, first.claim_token, first.operation) == (job_id, stale.claim_token, "complete")
    assert "lease expired" in first.reason
    assert (second.operation, second.reason) == ("fail", "job was claimed again under another token")
    assert recorder.of("completed") == [] and recorder.of("failed") == []


def test_a_raising_hook_is_logged_and_never_changes_the_outcome(engine, clean_jobs, caplog):
    class Broken:
        @sq.hookimpl
        def sqla_queue_job_completed(self, event):
            raise RuntimeError("metrics backend down")

    queue = sq.Queue(engine, plugins=[Broken()], load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")
    job_id = queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w")

    assert queue.complete(job.id, job.claim_token) is True
    assert queue.get_job(job_id).status is sq.JobStatus.COMPLETED
    [logged] = [r for r in caplog.records if r.exc_info and "sqla_queue_job_completed" in r.getMessage()]
    assert str(logged.exc_info[1]) == "metrics backend down"


def test_events_fire_in_lifecycle_order(recorded_queue, recorder):
    job_id = recorded_queue.enqueue("send_email", {})
    [job] = recorded_queue.claim(worker_id="w")
    recorded_queue.retry(job.id, job.claim_token, error="x")
    [job] = recorded_queue.claim(worker_id="w")
    recorded_queue.complete(job.id, job.claim_token)
    recorded_queue.claim(worker_id="w")

    assert recorder.names == ["enqueued", "claimed", "retried", "claimed", "completed", "empty_claim"]
    assert {e.job_id for name, e in recorder.events if name != "empty_claim"} == {job_id}


def test_a_replayed_outcome_fires_no_second_event(recorded_queue, recorder):
    """The hooks say "committed under its claim token": a replay committed nothing new."""
    done, failed, retried = recorded_queue.enqueue_many([{"task": "send_email", "payload": {}}] * 3)
    jobs = {j.id: j for j in recorded_queue.claim(worker_id="w", limit=3)}

    for _ in range(2):
        recorded_queue.complete(done, jobs[done].claim_token)
        recorded_queue.fail(failed, jobs[failed].claim_token, error="x")
        recorded_queue.retry(retried, jobs[retried].claim_token, error="x", delay=60)

    assert [e.job_id for e in recorder.of("completed")] == [done]
    assert [e.job_id for e in recorder.of("failed")] == [failed]
    assert [e.job_id for e in recorder.of("retried")] == [retried]
    assert recorder.of("lost_claim") == []
