"""Jobs with dependencies (``depends_on=``): waiting until every dependency finished, pending in
the statement that finishes the last one, whichever path finishes it; cancelled with a failed
dependency unless ``on_dependency_failure="run"``; refused at enqueue when they could never run."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text

import sqla_queue as sq


def _status(queue: sq.Queue, job_id: int) -> str:
    return queue.get_job(job_id).status.value


def _waiting_on(engine, job_id: int) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT waiting_on FROM sqla_queue_jobs WHERE id = :id"), {"id": job_id}).scalar_one()


def _claim_one(queue: sq.Queue, job_id: int) -> sq.ClaimedJob:
    (job,) = queue.claim(worker_id="test", limit=1)
    assert job.id == job_id
    return job


def test_a_job_waits_for_its_dependency_and_turns_pending_when_it_completes(queue):
    first = queue.enqueue("send_email", {"n": 1})
    second = queue.enqueue("send_email", {"n": 2}, depends_on=[first])
    assert (_status(queue, first), _status(queue, second)) == ("pending", "waiting")
    job = _claim_one(queue, first)  # the waiting job is never claimed
    assert queue.claim(worker_id="test") == []
    assert queue.complete(job.id, job.claim_token)
    assert _status(queue, second) == "pending"
    _claim_one(queue, second)


def test_fan_in_waits_for_every_dependency(queue):
    a, b, c = queue.enqueue_many([
        {"task": "send_email", "payload": {}},
        {"task": "send_email", "payload": {}},
        {"task": "send_email", "payload": {}, "depends_on": [sq.Earlier(0), sq.Earlier(1)]},
    ])
    assert _status(queue, c) == "waiting" and _waiting_on(queue.engine, c) == 2
    first = _claim_one(queue, a)
    queue.complete(first.id, first.claim_token)
    assert _status(queue, c) == "waiting" and _waiting_on(queue.engine, c) == 1
    second = _claim_one(queue, b)
    queue.complete(second.id, second.claim_token)
    assert _status(queue, c) == "pending" and _waiting_on(queue.engine, c) == 0


def test_a_completed_dependency_counts_as_done_at_enqueue(queue):
    first = queue.enqueue("send_email", {})
    job = _claim_one(queue, first)
    queue.complete(job.id, job.claim_token)
    assert _status(queue, queue.enqueue("send_email", {}, depends_on=[first])) == "pending"


def test_the_worker_drain_runs_dependents_that_become_ready_during_it(queue):
    order = []

    @queue.task(name="step")
    def step(payload, ctx):
        order.append(payload["n"])
        return payload["n"] * 10

    ids = queue.chain([("step", {"n": 1}), ("step", {"n": 2}), ("step", {"n": 3})])
    summary = queue.worker(queues=["default"]).run(until_empty=True)
    assert summary.completed == 3 and order == [1, 2, 3]
    assert [queue.get_job(i).status.value for i in ids] == ["completed"] * 3


def test_the_handler_reads_its_dependencies_results(queue):
    seen = {}

    @queue.task(name="produce")
    def produce(payload, ctx):
        return {"value": payload["v"]}

    @queue.task(name="consume")
    def consume(payload, ctx):
        seen.update(ctx.dependency_results)

    a, b, c = queue.enqueue_many([
        {"task": "produce", "payload": {"v": 1}},
        {"task": "produce", "payload": {"v": 2}},
        {"task": "consume", "payload": {}, "depends_on": [sq.Earlier(0), sq.Earlier(1)]},
    ])
    queue.worker(queues=["default"]).run(until_empty=True)
    assert seen == {a: {"value": 1}, b: {"value": 2}}
    assert _status(queue, c) == "completed"


def test_a_handler_transaction_completion_releases_dependents(queue):
    @queue.task(name="in_tx")
    def in_tx(payload, ctx):
        with ctx.transaction() as session:
            session.execute(text("SELECT 1"))

    first = queue.enqueue("in_tx", {})
    second = queue.enqueue("send_email", {}, depends_on=[first])
    queue.worker(queues=["default"]).run(until_empty=True)
    assert (_status(queue, first), _status(queue, second)) == ("completed", "completed")


def test_a_failed_dependency_cancels_its_dependents_and_theirs(queue):
    a, b, c = queue.enqueue_many([
        {"task": "send_email", "payload": {}, "max_attempts": 1},
        {"task": "send_email", "payload": {}, "depends_on": [sq.Earlier(0)]},
        {"task": "send_email", "payload": {}, "depends_on": [sq.Earlier(1)]},
    ])
    job = _claim_one(queue, a)
    queue.fail(job.id, job.claim_token, error="boom")
    for job_id in (b, c):
        view = queue.get_job(job_id)
        assert view.status.value == "cancelled" and view.last_error == "a dependency failed or was cancelled"


def test_run_anyway_counts_a_failed_dependency_as_done(queue):
    a, b, c = queue.enqueue_many([
        {"task": "send_email", "payload": {}, "max_attempts": 1},
        {"task": "send_email", "payload": {}, "depends_on": [sq.Earlier(0)], "on_dependency_failure": "run"},
        {"task": "send_email", "payload": {}, "depends_on": [sq.Earlier(0)]},
    ])
    job = _claim_one(queue, a)
    queue.retry(job.id, job.claim_token, error="boom")  # no attempt left: failed for good
    assert (_status(queue, a), _status(queue, b), _status(queue, c)) == ("failed", "pending", "cancelled")


def test_cancelling_a_dependency_cancels_the_waiting_job(queue):
    first = queue.enqueue("send_email", {})
    second = queue.enqueue("send_email", {}, depends_on=[first])
    queue.cancel(first)
    assert _status(queue, second) == "cancelled"


def test_a_waiting_job_can_be_cancelled_and_its_dependents_follow(queue):
    a, b, c = queue.enqueue_many([
        {"task": "send_email", "payload": {}},
        {"task": "send_email", "payload": {}, "depends_on": [sq.Earlier(0)]},
        {"task": "send_email", "payload": {}, "depends_on": [sq.Earlier(1)]},
    ])
    queue.cancel(b)
    assert (_status(queue, a), _status(queue, b), _status(queue, c)) == ("pending", "cancelled", "cancelled")


def test_recovery_failing_an_expired_last_attempt_cancels_dependents(queue, expire_lease):
    first = queue.enqueue("send_email", {}, max_attempts=1)
    second = queue.enqueue("send_email", {}, depends_on=[first])
    _claim_one(queue, first)
    expire_lease(first)
    queue.recover_expired()
    assert (_status(queue, first), _status(queue, second)) == ("failed", "cancelled")


@pytest.mark.parametrize("depends_on, message", [
    ([999], "do not exist: 999"),
    ("7", "must be a list"),
    ([0], "positive"),
    ([sq.Earlier(0)], "enqueue() has none"),
])
def test_bad_dependencies_are_refused_and_nothing_is_written(queue, depends_on, message):
    with pytest.raises(sq.InvalidInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        queue.enqueue("send_email", {}, depends_on=depends_on)
    assert queue.list_jobs().jobs == []


@pytest.mark.parametrize("index", [1, 2, -1])
def test_an_item_can_only_depend_on_an_earlier_one(queue, index):
    with pytest.raises(sq.InvalidInputError, match=r"jobs\[1\]: sq.Earlier\(.*must name an earlier item"):
        queue.enqueue_many([
            {"task": "send_email", "payload": {}},
            {"task": "send_email", "payload": {}, "depends_on": [sq.Earlier(index)]},
        ])
    assert queue.list_jobs().jobs == []


def test_a_dependency_that_failed_already_is_refused_unless_run_anyway(queue):
    first = queue.enqueue("send_email", {}, max_attempts=1)
    job = _claim_one(queue, first)
    queue.fail(job.id, job.claim_token, error="boom")
    with pytest.raises(sq.errors.JobStateError, match=f"depends on job {first}, which is failed"):
        queue.enqueue("send_email", {}, depends_on=[first])
    assert [j.id for j in queue.list_jobs().jobs] == [first]
    assert _status(queue, queue.enqueue("send_email", {}, depends_on=[first], on_dependency_failure="run")) == "pending"


def test_dependencies_and_idempotency_keys_do_not_mix(queue):
    first = queue.enqueue("send_email", {})
    with pytest.raises(sq.InvalidInputError, match="idempotency keys cannot be combined"):
        queue.enqueue("send_email", {}, depends_on=[first], idempotency_key="k")


def test_a_bad_on_dependency_failure_is_refused(queue):
    with pytest.raises(sq.InvalidInputError, match="on_dependency_failure must be one of"):
        queue.enqueue("send_email", {}, depends_on=[], on_dependency_failure="retry")


def test_pruning_keeps_a_job_an_active_job_depends_on_and_takes_the_edges_with_the_jobs(queue):
    first = queue.enqueue("send_email", {})
    second = queue.enqueue("send_email", {}, depends_on=[first])
    job = _claim_one(queue, first)
    queue.complete(job.id, job.claim_token)
    queue.prune(completed_after=timedelta(microseconds=1))
    assert queue.get_job(first) is not None  # second (pending now) still reads its result
    job = _claim_one(queue, second)
    queue.complete(job.id, job.claim_token)
    queue.prune(completed_after=timedelta(microseconds=1))
    assert queue.get_job(first) is None and queue.get_job(second) is None
    with queue.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM sqla_queue_jobs_dependencies")).scalar_one() == 0


def test_a_job_released_cancelled_at_shutdown_cancels_its_dependents(queue):
    first = queue.enqueue("send_email", {})
    second = queue.enqueue("send_email", {}, depends_on=[first])
    job = _claim_one(queue, first)
    queue.cancel(first)  # running: a cancel request
    queue.release([job])
    assert (_status(queue, first), _status(queue, second)) == ("cancelled", "cancelled")
