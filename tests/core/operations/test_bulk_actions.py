"""Bulk operator actions: `retry_jobs` and `cancel_jobs` act on every job a filter matches (up to
a limit) in one statement, with the rules of `retry_now` and `cancel`, skip the rows another
transaction holds and say so, and refuse bad filters without writing anything."""

from __future__ import annotations

import pytest
from sqlalchemy import text

import sqla_queue as sq


@pytest.fixture
def failed(ops_queue):
    """Ids of five failed jobs: three send_email on "default", two resize on "images"."""
    ids = ops_queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(3)])
    ids += ops_queue.enqueue_many([{"task": "resize", "payload": {"n": n}} for n in range(2)])
    for queue_name, count in (("default", 3), ("images", 2)):
        for job in ops_queue.claim(queue_name, worker_id="w", limit=count):
            assert ops_queue.fail(job.id, job.claim_token, error="boom")
    return ids


def statuses(queue: sq.Queue, ids) -> list[str]:
    return [queue.get_job(job_id).status.value for job_id in ids]


def test_retry_jobs_makes_every_matching_failed_job_pending(ops_queue, failed):
    result = ops_queue.retry_jobs(queue_name="images")

    assert result == sq.BulkResult(action="retry", changed=tuple(failed[3:]), skipped=0)
    assert statuses(ops_queue, failed) == ["failed"] * 3 + ["pending"] * 2
    assert ops_queue.retry_jobs(task="send_email", job_ids=[failed[0], failed[4]]).changed == (failed[0],)
    assert ops_queue.retry_jobs().changed == tuple(failed[1:3])


def test_retry_jobs_stops_at_the_limit_and_counts_the_rest_as_skipped(ops_queue, failed):
    result = ops_queue.retry_jobs(limit=2)
    assert (result.changed, result.skipped, result.count) == (tuple(failed[:2]), 3, 2)


def test_bulk_actions_skip_rows_another_transaction_holds(ops_queue, failed, engine):
    with engine.connect() as holder:
        holder.execute(text("SELECT 1 FROM sqla_queue_jobs WHERE id = :id FOR UPDATE"), {"id": failed[0]})
        result = ops_queue.retry_jobs(queue_name="default")
        holder.rollback()
    assert (result.changed, result.skipped) == (tuple(failed[1:3]), 1)
    assert statuses(ops_queue, failed[:1]) == ["failed"]


def test_retry_jobs_retries_one_job_per_idempotency_key(ops_queue):
    first = ops_queue.enqueue("send_email", {}, idempotency_key="k")
    [job] = ops_queue.claim("default", worker_id="w")
    ops_queue.fail(job.id, job.claim_token, error="boom")
    second = ops_queue.enqueue("send_email", {}, idempotency_key="k")
    [job] = ops_queue.claim("default", worker_id="w")
    ops_queue.fail(job.id, job.claim_token, error="boom")

    result = ops_queue.retry_jobs()

    assert (result.changed, result.skipped) == ((first,), 1)
    assert statuses(ops_queue, [first, second]) == ["pending", "failed"]


def test_cancel_jobs_cancels_pending_and_requests_running(ops_queue):
    pending = ops_queue.enqueue_many([{"task": "send_email", "payload": {}}] * 3)
    [running] = ops_queue.claim("default", worker_id="w")
    other = ops_queue.enqueue("resize", {})

    result = ops_queue.cancel_jobs(queue_name="default")

    assert result.action == "cancel" and result.changed == tuple(pending)
    assert result.cancel_requested == (running.id,)
    assert statuses(ops_queue, pending) == ["running", "cancelled", "cancelled"]
    assert ops_queue.get_job(running.id).cancel_requested_at is not None
    assert statuses(ops_queue, [other]) == ["pending"]


def test_cancel_jobs_filters_by_status(ops_queue):
    ids = ops_queue.enqueue_many([{"task": "send_email", "payload": {}}] * 2)
    [running] = ops_queue.claim("default", worker_id="w")

    result = ops_queue.cancel_jobs(status="pending")

    assert (result.changed, result.cancel_requested) == ((ids[1],), ())
    assert ops_queue.get_job(running.id).cancel_requested_at is None


def test_cancel_jobs_tells_plugins_of_each_job_it_ended(engine, clean_jobs):
    heard = []

    class Listener:
        @sq.hookimpl
        def sqla_queue_job_cancelled(self, event):
            heard.append((event.job_id, event.requested_while_running))

    queue = sq.Queue(engine, load_entrypoints=False, plugins=[Listener()])
    queue.task(lambda payload, ctx: None, name="send_email")
    ids = queue.enqueue_many([{"task": "send_email", "payload": {}}] * 2)
    queue.cancel_jobs(job_ids=ids)
    assert heard == [(ids[0], False), (ids[1], False)]


@pytest.mark.parametrize(("call", "message"), [
    (lambda q: q.cancel_jobs(), "needs a filter"),
    (lambda q: q.cancel_jobs(status="failed"), "only pending or running"),
    (lambda q: q.cancel_jobs(status="nope"), "unknown status"),
    (lambda q: q.retry_jobs(limit=0), "limit"),
    (lambda q: q.retry_jobs(limit=10_001), "at most 10000"),
    (lambda q: q.retry_jobs(job_ids="12"), "job_ids must be a list"),
    (lambda q: q.retry_jobs(job_ids=[1, -2]), "job_id"),
    (lambda q: q.cancel_jobs(queue_name=""), "queue"),
])
def test_bad_filters_are_refused_and_nothing_changes(ops_queue, failed, call, message):
    with pytest.raises(sq.InvalidInputError, match=message):
        call(ops_queue)
    assert statuses(ops_queue, failed) == ["failed"] * 5
