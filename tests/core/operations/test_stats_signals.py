"""Every health signal of `Queue.stats()`, each produced by a real run on real PostgreSQL.

Times are moved with UPDATEs on the database clock, never waited for.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

import sqla_queue as sq
from sqla_queue.core.counters import EmptyClaimThrottle


class EmptyClaims:
    """Keeps every empty-claim event."""

    def __init__(self) -> None:
        self.events: list = []

    @sq.hookimpl
    def sqla_queue_empty_claim(self, event):
        self.events.append(event)


def test_a_worker_run_produces_counts_durations_retries_and_failures(ops_queue):
    @ops_queue.task(name="flaky", retry_delay=0)
    def flaky(payload, ctx):
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")

    @ops_queue.task(name="doomed", max_attempts=2, retry_delay=0)
    def doomed(payload, ctx):
        raise RuntimeError("always fails")

    ops_queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(5)])
    ops_queue.enqueue("flaky", {})
    ops_queue.enqueue("doomed", {})
    ops_queue.enqueue("send_email", {}, delay=3600)  # stays scheduled

    summary = ops_queue.worker(queues=["default"], concurrency=2, poll_interval=0.05).run(until_empty=True)

    assert (summary.completed, summary.retried, summary.failed) == (6, 2, 1)
    health = ops_queue.stats()["default"]
    assert (health.pending, health.scheduled, health.eligible, health.running) == (1, 1, 0, 0)
    assert (health.completed, health.failed, health.retried) == (6, 1, 2)
    assert health.lease_recoveries == 0 and health.oldest_eligible_age is None
    assert timedelta(0) <= health.duration_p50 <= health.duration_p95 <= health.duration_max


def test_claim_to_completion_percentiles_over_the_window(ops_queue, run_sql):
    ops_queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(25)])
    for job in ops_queue.claim(worker_id="w", limit=25):
        assert ops_queue.complete(job.id, job.claim_token)
    # Jobs 1..20 took 1..20 s; jobs 21..25 took 100 s and finished two hours ago.
    run_sql("UPDATE sqla_queue_jobs SET locked_at = completed_at - make_interval(secs => id) WHERE id <= 20")
    run_sql("UPDATE sqla_queue_jobs SET completed_at = now() - interval '2 hours',"
            " locked_at = now() - interval '2 hours' - interval '100 seconds' WHERE id > 20")

    recent = ops_queue.stats()["default"]
    wide = ops_queue.stats(window=timedelta(hours=3))["default"]

    assert recent.completed == 20
    assert (recent.duration_p50, recent.duration_p95, recent.duration_max) == (
        timedelta(seconds=10.5), timedelta(seconds=19.05), timedelta(seconds=20))
    assert wide.completed == 25 and wide.duration_max == timedelta(seconds=100)


def test_failures_count_only_inside_the_window(ops_queue, run_sql):
    for _ in range(3):
        ops_queue.enqueue("send_email", {})
    for job in ops_queue.claim(worker_id="w", limit=3):
        ops_queue.fail(job.id, job.claim_token, error="bad address")
    run_sql("UPDATE sqla_queue_jobs SET failed_at = now() - interval '1 hour' WHERE id = 1")

    assert ops_queue.stats()["default"].failed == 2
    assert ops_queue.stats(window=7200)["default"].failed == 3


def test_retries_are_counted_once_even_when_the_outcome_is_replayed(ops_queue, counters):
    ops_queue.enqueue("send_email", {})
    [job] = ops_queue.claim(worker_id="w")
    first = ops_queue.retry(job.id, job.claim_token, error="timeout")
    replay = ops_queue.retry(job.id, job.claim_token, error="timeout")  # the reply was lost

    assert first == replay and first.status is sq.JobStatus.PENDING
    assert counters() == {("default", "retried"): 1}
    assert ops_queue.stats()["default"].retried == 1


def test_the_last_attempt_is_a_failure_not_a_retry(ops_queue):
    ops_queue.enqueue("resize", {})  # images, max_attempts=2
    [first] = ops_queue.claim("images", worker_id="w")
    ops_queue.retry(first.id, first.claim_token, error="disk full")
    [last] = ops_queue.claim("images", worker_id="w")
    ops_queue.retry(last.id, last.claim_token, error="disk full")

    images = ops_queue.stats()["images"]
    assert (images.retried, images.failed, images.pending) == (1, 1, 0)


def test_forced_lease_expiry_counts_as_a_recovery_whichever_way_the_job_goes(ops_queue, run_sql):
    again = ops_queue.enqueue("send_email", {})
    last_try = ops_queue.enqueue("send_email", {}, max_attempts=1)
    ops_queue.claim(worker_id="crashed", limit=2)
    run_sql("UPDATE sqla_queue_jobs SET lease_expires_at = NULL, locked_at = clock_timestamp() - interval '1 hour'")

    assert sorted(ops_queue.recover_expired(lease=60)) == [again, last_try]

    health = ops_queue.stats()["default"]
    assert health.lease_recoveries == 2
    assert (health.pending, health.eligible, health.failed) == (1, 1, 1)
    assert ops_queue.get_job(last_try).last_error == "claim lease expired on the last attempt"


def test_jobs_on_or_one_before_their_last_attempt(ops_queue, run_sql):
    ops_queue.enqueue("resize", {})  # 2 attempts: after one claim it runs its last
    ops_queue.claim("images", worker_id="w")
    ops_queue.enqueue("resize", {}, max_attempts=1)  # pending, next attempt is its last
    ops_queue.enqueue("resize", {}, max_attempts=3)  # two attempts to spare

    assert ops_queue.stats()["images"].near_max_attempts == 2


# -- claims that came back empty while jobs were pending -------------------------------------


@pytest.fixture
def recorded(ops_queue):
    events = EmptyClaims()
    ops_queue.plugin_manager.register(events)
    return events


def test_an_empty_claim_with_nothing_pending_anywhere_is_not_a_signal(ops_queue, recorded, counters):
    assert ops_queue.claim(worker_id="w") == []
    assert counters() == {}
    assert recorded.events[-1].reason is None


def test_empty_claim_because_the_jobs_are_scheduled_for_later(ops_queue, recorded, counters):
    ops_queue.enqueue("send_email", {}, delay=3600)
    assert ops_queue.claim(worker_id="w") == []
    assert recorded.events[-1].reason == "empty_scheduled"
    assert ops_queue.stats()["default"].empty_claims_scheduled == 1
    assert counters() == {("default", "empty_scheduled"): 1}


def test_empty_claim_because_another_transaction_holds_the_due_jobs(ops_queue, recorded, engine):
    job_id = ops_queue.enqueue("send_email", {})
    with engine.connect() as holder:
        holder.exec_driver_sql("SELECT id FROM sqla_queue_jobs WHERE id = %(id)s FOR UPDATE", {"id": job_id})
        assert ops_queue.claim(worker_id="w") == []  # SKIP LOCKED passes the held row
        holder.rollback()
    assert recorded.events[-1].reason == "empty_locked"
    health = ops_queue.stats()["default"]
    assert (health.empty_claims_locked, health.empty_claims, health.eligible) == (1, 1, 1)


def test_locked_due_jobs_outrank_scheduled_ones_as_the_reason(ops_queue, recorded, engine):
    due = ops_queue.enqueue("send_email", {})
    ops_queue.enqueue("send_email", {}, delay=3600)
    ops_queue.enqueue("resize", {})  # pending in another queue too
    with engine.connect() as holder:
        holder.exec_driver_sql("SELECT id FROM sqla_queue_jobs WHERE id = %(id)s FOR UPDATE", {"id": due})
        assert ops_queue.claim(worker_id="w") == []
        holder.rollback()
    assert recorded.events[-1].reason == "empty_locked"


def test_empty_claim_because_no_pending_job_has_attempts_left(ops_queue, recorded, run_sql):
    job_id = ops_queue.enqueue("send_email", {})
    run_sql("UPDATE sqla_queue_jobs SET attempts = max_attempts WHERE id = :id", id=job_id)
    assert ops_queue.claim(worker_id="w") == []
    assert recorded.events[-1].reason == "empty_exhausted"
    assert ops_queue.stats()["default"].empty_claims_exhausted == 1


def test_empty_claim_on_a_queue_without_jobs_while_another_queue_has_them(ops_queue, recorded):
    ops_queue.enqueue("resize", {})  # images
    assert ops_queue.claim("default", worker_id="w") == []
    assert recorded.events[-1].reason == "empty_other_queue"

    stats = ops_queue.stats()
    assert [h.queue for h in stats] == ["images"]  # only queues that have jobs are listed
    assert stats.idle["default"].empty_claims_other_queue == 1
    assert stats["default"].empty_claims == 1


def test_rapid_empty_claims_are_tallied_and_counted_with_the_next_classification(ops_queue, counters):
    now = [0.0]
    ops_queue.core.counters.throttle = EmptyClaimThrottle(interval=60, clock=lambda: now[0])  # a clock we move
    ops_queue.enqueue("send_email", {}, delay=3600)
    for _ in range(3):  # one classification, two tallied
        assert ops_queue.claim(worker_id="w") == []
    assert counters() == {("default", "empty_scheduled"): 1}
    now[0] = 61.0
    ops_queue.claim(worker_id="w")
    assert counters() == {("default", "empty_scheduled"): 4}


def test_stats_measure_on_the_database_clock_and_report_their_window(ops_queue):
    stats = ops_queue.stats(window=timedelta(minutes=5))
    assert stats.window == timedelta(minutes=5) and stats.measured_at.tzinfo is not None


@pytest.mark.parametrize(
    ("window", "message"),
    [(0, "window must be positive"), (-5, "window must be positive"),
     ("15m", "window must be a timedelta or seconds"), (float("nan"), "window must be finite")],
)
def test_a_bad_window_is_refused(ops_queue, window, message):
    with pytest.raises(sq.InvalidInputError, match=message):
        ops_queue.stats(window=window)


def test_one_recovery_pass_over_several_queues_counts_each_queue(ops_queue, run_sql, counters):
    ops_queue.enqueue_many([{"task": "send_email", "payload": {}}] * 2 + [{"task": "resize", "payload": {}}])
    ops_queue.claim("default", worker_id="crashed", limit=2)
    ops_queue.claim("images", worker_id="crashed")
    run_sql("UPDATE sqla_queue_jobs SET lease_expires_at = NULL, locked_at = clock_timestamp() - interval '1 hour'")

    assert len(ops_queue.recover_expired(lease=60)) == 3
    assert counters() == {("default", "lease_recovered"): 2, ("images", "lease_recovered"): 1}
