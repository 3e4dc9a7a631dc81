"""Lost-claim reports must be true. The connection-loss run showed a worker reporting "lost
claim ... completed under another claim" for a job it had just completed itself: its heartbeat
had taken a snapshot of held jobs, the handler's completion committed, then the renewal missed
the row. These pin the three cases down in-process."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

import sqla_queue as sq


class LostClaims:
    def __init__(self) -> None:
        self.events: list[sq.LostClaim] = []

    @sq.hookimpl
    def sqla_queue_lost_claim(self, event):
        self.events.append(event)


@pytest.fixture
def setup(create_database):
    engine = create_engine(create_database(), poolclass=NullPool)
    lost = LostClaims()
    queue = sq.Queue(engine, load_entrypoints=False, plugins=[lost])
    queue.task(name="work")(lambda payload, ctx: None)
    yield queue, lost, engine
    engine.dispose()


def test_heartbeat_racing_its_own_completion_is_not_a_lost_claim(setup):
    queue, lost, _ = setup
    queue.enqueue("work", {})
    [job] = queue.claim(worker_id="w1")
    assert queue.complete(job.id, job.claim_token)

    assert queue.heartbeat([job]) == set()
    assert lost.events == []


def test_heartbeat_after_recovery_is_a_lost_claim(setup):
    queue, lost, engine = setup
    queue.enqueue("work", {})
    [job] = queue.claim(worker_id="w1")
    with engine.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET lease_expires_at = NULL, locked_at = locked_at - interval '1 hour'"))
    assert queue.recover_expired(lease=timedelta(seconds=1)) == [job.id]

    assert queue.heartbeat([job]) == set()
    assert [(e.job_id, e.operation) for e in lost.events] == [(job.id, "heartbeat")]
    assert "lease expired" in lost.events[0].reason


def test_heartbeat_after_another_worker_reclaimed_is_a_lost_claim(setup):
    queue, lost, engine = setup
    queue.enqueue("work", {})
    [job] = queue.claim(worker_id="w1")
    with engine.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET lease_expires_at = NULL, locked_at = locked_at - interval '1 hour'"))
    queue.recover_expired(lease=timedelta(seconds=1))
    [again] = queue.claim(worker_id="w2")
    assert again.id == job.id and again.claim_token != job.claim_token

    assert queue.heartbeat([job]) == set()
    assert [(e.job_id, e.claim_token) for e in lost.events] == [(job.id, job.claim_token)]
    assert "claimed again" in lost.events[0].reason


def test_a_fenced_claim_is_reported_as_a_fence_and_the_job_is_left_as_it_is(setup):
    queue, lost, _ = setup
    queue.enqueue("work", {})
    [job] = queue.claim(worker_id="w1")

    queue.report_fenced(job, "lease could not be renewed before it expired")

    assert [(e.job_id, e.claim_token, e.operation, e.reason) for e in lost.events] == [
        (job.id, job.claim_token, "fence", "lease could not be renewed before it expired")]
    assert queue.get_job(job.id).status is sq.JobStatus.RUNNING  # recovery decides its fate
