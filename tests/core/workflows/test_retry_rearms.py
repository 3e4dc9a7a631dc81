"""Retrying a failed dependency (`Queue.retry_now`, `Queue.retry_jobs`, ``sqla-queue jobs
retry``, the dashboard's action: one statement) brings back the dependents its failure
cancelled, and theirs, to ``waiting`` with ``waiting_on`` recounted; a dependent that another
failed dependency would cancel again stays cancelled, and so does what is below it."""

from __future__ import annotations

from sqlalchemy import text

import sqla_queue as sq


def _fail(queue: sq.Queue, job_id: int) -> None:
    job = queue.core.outcomes.claim_by_id(job_id, "test")
    assert queue.fail(job.id, job.claim_token, error="boom")


def _state(engine, job_id: int) -> str:
    with engine.connect() as conn:
        return conn.execute(text("SELECT status || ':' || waiting_on || ':' || coalesce(last_error, '-') "
                                 "FROM sqla_queue_jobs WHERE id = :id"), {"id": job_id}).scalar_one()


def _run(queue: sq.Queue, job_id: int) -> None:
    job = queue.core.outcomes.claim_by_id(job_id, "test")
    assert queue.complete(job.id, job.claim_token)


def test_retrying_a_failed_dependency_rearms_what_its_failure_cancelled(queue, engine):
    first, other = queue.enqueue("send_email", {}), queue.enqueue("send_email", {})
    child, grandchild, anyway = queue.enqueue_many([
        {"task": "send_email", "payload": {}, "depends_on": [first, other]},
        {"task": "send_email", "payload": {}, "depends_on": [sq.Earlier(0)]},
        {"task": "send_email", "payload": {}, "depends_on": [first], "on_dependency_failure": "run"},
    ])
    _fail(queue, first)
    assert [queue.get_job(i).status.value for i in (child, grandchild, anyway)] == ["cancelled", "cancelled", "pending"]
    assert queue.retry_now(first).status is sq.JobStatus.PENDING
    assert _state(engine, child) == "waiting:2:-"  # first (pending again) and other
    assert _state(engine, grandchild) == "waiting:1:-"
    assert queue.get_job(anyway).status is sq.JobStatus.PENDING  # it never was cancelled
    _run(queue, first)
    _run(queue, other)
    _run(queue, child)
    assert queue.get_job(grandchild).status is sq.JobStatus.PENDING


def test_a_dependent_another_failure_would_cancel_stays_cancelled(queue, engine):
    first, second = queue.enqueue("send_email", {}), queue.enqueue("send_email", {})
    child, grandchild = queue.enqueue_many([
        {"task": "send_email", "payload": {}, "depends_on": [first, second]},
        {"task": "send_email", "payload": {}, "depends_on": [sq.Earlier(0)]},
    ])
    _fail(queue, first)
    _fail(queue, second)
    queue.retry_now(first)
    assert [queue.get_job(i).status.value for i in (child, grandchild)] == ["cancelled", "cancelled"]
    queue.retry_jobs(job_ids=[second])
    assert _state(engine, child) == "waiting:2:-"
    assert _state(engine, grandchild) == "waiting:1:-"


def test_a_job_cancelled_by_an_operator_is_not_rearmed(queue, engine):
    first = queue.enqueue("send_email", {})
    child = queue.enqueue("send_email", {}, depends_on=[first])
    queue.cancel(child)
    _fail(queue, first)
    queue.retry_now(first)
    assert queue.get_job(child).status is sq.JobStatus.CANCELLED
