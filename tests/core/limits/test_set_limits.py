"""`Queue.set_limits`: stored per queue, checked before anything is written; rates, group rates
and fair turns as one claim sees them (`queue.claim` takes the limited claim too)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text

import sqla_queue as sq
from sqla_queue.core.limits import RATE_AHEAD
from sqla_queue.errors import InvalidInputError

pytestmark = pytest.mark.usefixtures("clean_jobs")

SECOND = timedelta(seconds=1)


def test_limits_are_stored_changed_one_at_a_time_and_removed(queue):
    assert queue.set_limits("default", concurrency=20, rate="100/s") == sq.QueueLimits(
        "default", concurrency=20, rate=sq.Rate(100, SECOND))
    assert queue.set_limits("default", group_concurrency=1, rate=None) == sq.QueueLimits(
        "default", concurrency=20, group_concurrency=1)
    assert queue.set_limits("default", fair=True, group_rate="5/m").describe() == (
        "concurrency 20, group concurrency 1, group rate 5/m, fair")
    assert [state.limits for state in queue.list_queues()] == [sq.QueueLimits(
        "default", concurrency=20, group_concurrency=1, group_rate=sq.Rate(5, timedelta(minutes=1)), fair=True)]
    assert queue.set_limits("default", concurrency=None, group_concurrency=None, group_rate=None, fair=None) is None
    assert queue.list_queues() == []  # no jobs, no pause, no limits: nothing to list


@pytest.mark.parametrize(("limits", "message"), [
    ({"concurrency": 0}, "concurrency must be an integer from 1 to 2147483647, got 0"),
    ({"group_concurrency": True}, "group_concurrency must be an integer from 1"),
    ({"concurrency": "3"}, "concurrency must be an integer from 1"),
    ({"rate": "100"}, "rate must be a count per period such as '100/s', '5/m' or '1000/h', got '100'"),
    ({"rate": "100/d"}, "rate must be a count per period"),
    ({"group_rate": "0/s"}, "group_rate must start with a count from 1 to 2147483647, got '0/s'"),
    ({"rate": 100}, "rate must be a count per period"),
    ({"fair": "yes"}, "fair must be True, False or None, got 'yes'"),
])
def test_a_bad_limit_names_what_is_wrong_and_writes_nothing(queue, limits, message):
    queue.set_limits("default", concurrency=4)
    with pytest.raises(InvalidInputError, match=message):
        queue.set_limits("default", **{"group_concurrency": 2, **limits})
    assert queue.list_queues()[0].limits == sq.QueueLimits("default", concurrency=4)


def test_an_unknown_limit_is_a_type_error(queue):
    with pytest.raises(TypeError, match="unexpected keyword argument 'rate_limit'"):
        queue.set_limits("default", rate_limit="1/s")


def test_a_rate_lets_a_bucket_of_starts_through_then_throttles(queue):
    """200/h: a bucket of 2 (a hundredth of the count), refilled at one start per 18 s."""
    queue.enqueue_many([{"task": "send_email", "payload": {}}] * 5)
    queue.set_limits("default", rate="200/h")
    before = queue.stats()["default"].throttled  # the counters outlive other tests' jobs
    assert len(queue.claim("default", worker_id="w", limit=10)) == 2
    assert queue.claim("default", worker_id="w", limit=10) == []
    assert queue.stats()["default"].throttled - before == 2  # both claims left due jobs behind


def test_a_direct_claim_takes_no_tokens_ahead_of_time(queue):
    """Only a worker, which starts each job when its token is due, claims a rate's tokens early:
    `Queue.claim`'s caller runs what it gets at once, so 20/s (a bucket of one) gives it one."""
    queue.enqueue_many([{"task": "send_email", "payload": {}}] * 10)
    queue.set_limits("default", rate="20/s")
    [job] = queue.claim("default", worker_id="w", limit=10)
    assert job.start_after == 0.0


def test_a_claim_ahead_of_a_rates_tokens_stores_the_wait_it_returns(queue, engine):
    """A worker's claim takes a rate's tokens early and tells it how long each job waits
    (`ClaimedJob.start_after`); the same wait is in the job's ``locked_at`` and its lease: one
    moment of claim for all, plus each job's own wait. Computed once per use, the bucket (which
    grows with the clock) gave the worker a shorter wait than the ``locked_at`` stored."""
    queue.enqueue_many([{"task": "send_email", "payload": {}}] * 5)
    queue.set_limits("default", rate="20/s")
    jobs = queue.core.limits.claim("default", worker_id="w", limit=5, lease=30, ahead=RATE_AHEAD).jobs

    waits = [job.start_after for job in jobs]
    assert len(jobs) == 5 and waits == sorted(waits) and waits[-1] > 0.15
    with engine.connect() as conn:
        stored = [conn.execute(text(
            "SELECT locked_at - make_interval(secs => :wait), lease_expires_at - locked_at"
            " FROM sqla_queue_jobs WHERE id = :id"), {"wait": job.start_after, "id": job.id}).one()
            for job in jobs]
    assert len({claimed_at for claimed_at, _lease in stored}) == 1, stored
    assert {lease for _claimed_at, lease in stored} == {timedelta(seconds=30)}


def test_a_group_rate_limits_each_key_on_its_own(queue):
    queue.enqueue_many([{"task": "send_email", "payload": {}, "group_key": key} for key in "aabb"])
    queue.set_limits("default", group_rate="1/m")
    first = queue.claim("default", worker_id="w", limit=10)
    assert sorted(queue.get_job(job.id).group_key for job in first) == ["a", "b"]
    assert queue.claim("default", worker_id="w", limit=10) == []


def test_fair_claims_take_the_keys_in_turn_and_give_an_idle_keys_share_to_the_busy(queue):
    a = queue.enqueue_many([{"task": "send_email", "payload": {}, "group_key": "a"}] * 10)
    b = queue.enqueue_many([{"task": "send_email", "payload": {}, "group_key": "b"}] * 3)
    queue.set_limits("default", fair=True)

    assert {job.id for job in queue.claim("default", worker_id="w", limit=4)} == {*a[:2], *b[:2]}
    assert {job.id for job in queue.claim("default", worker_id="w", limit=4)} == {*a[2:5], b[2]}
    assert {job.id for job in queue.claim("default", worker_id="w", limit=4)} == set(a[5:9])


def test_without_fair_the_claim_takes_the_queue_order(queue):
    a = queue.enqueue_many([{"task": "send_email", "payload": {}, "group_key": "a"}] * 10)
    queue.enqueue_many([{"task": "send_email", "payload": {}, "group_key": "b"}] * 3)
    queue.set_limits("default", concurrency=100)
    assert [job.id for job in queue.claim("default", worker_id="w", limit=4)] == a[:4]


def test_a_retried_or_snoozed_job_frees_its_keys_slot(queue):
    first, second, third = queue.enqueue_many([{"task": "send_email", "payload": {}, "group_key": "k"}] * 3)
    queue.set_limits("default", group_concurrency=1)
    [job] = queue.claim("default", worker_id="w", limit=10)
    assert job.id == first and queue.claim("default", worker_id="w", limit=10) == []
    assert queue.retry(job.id, job.claim_token, error="again").status is sq.JobStatus.PENDING  # due later
    [then] = queue.claim("default", worker_id="w", limit=10)
    assert then.id == second
    assert queue.snooze(then, timedelta(hours=1)) is not None
    assert [job.id for job in queue.claim("default", worker_id="w", limit=10)] == [third]


def test_a_full_rate_bucket_holds_its_whole_burst_however_the_clock_is_read(engine):
    # A bucket never refilled (refilled_at NULL) is full: its elapsed time is zero, not the
    # difference of two clock readings, which may come out a few microseconds negative.
    from sqlalchemy import Float, bindparam, func, literal, null, select
    from sqla_queue.sql.claim.limited import _tokens

    full = func.floor(_tokens(null(), null(), literal(200 / 3600, Float), literal(2.0, Float)))
    rows = func.generate_series(1, 20_000).table_valued("n")
    with engine.connect() as conn:
        fewest = conn.execute(select(func.min(full)).select_from(rows)).scalar_one()
    assert fewest == 2
