"""Cancelling a running job from the worker's side: the request reaches the handler at the next
lease renewal (`JobContext.cancel_requested`; an ``async def`` handler is cancelled), and the job
ends ``cancelled`` whatever the handler does next, never retried. A job the worker holds but has
not started is not run at all; one whose lease expires, or that a shutdown gives back, ends
cancelled too. Real worker, real PostgreSQL; the lease is short so a renewal comes quickly."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import pytest

import sqla_queue as sq

from waiting import wait_until

LEASE = timedelta(seconds=1.5)  # renewed every 0.5 s: the longest a cancel request waits
FAST = {"poll_interval": 0.05, "lease": LEASE}


def run_in_thread(worker, **options) -> threading.Thread:
    thread = threading.Thread(target=worker.run, kwargs=options, daemon=True)
    thread.start()
    return thread


def test_a_sync_handler_sees_the_request_within_one_renewal_and_the_job_ends_cancelled(recorded_queue, recorder):
    started, observed = threading.Event(), {}

    @recorded_queue.task(name="long_report", max_attempts=5)
    def long_report(payload, ctx):
        started.set()
        begun = time.monotonic()
        while not ctx.cancel_requested and time.monotonic() - begun < 30:
            time.sleep(0.02)
        observed["after"] = time.monotonic()
        return {"rows": 10}  # returned after the request: ends cancelled all the same, no result

    job_id = recorded_queue.enqueue("long_report", {})
    worker = recorded_queue.worker(concurrency=1, **FAST)
    thread = run_in_thread(worker, until_empty=True)
    assert started.wait(15)

    requested_at = time.monotonic()
    view = recorded_queue.cancel(job_id)
    thread.join(30)

    assert view.status is sq.JobStatus.RUNNING and view.cancel_requested_at is not None
    assert observed["after"] - requested_at < LEASE.total_seconds() / 3 + 1.0  # a renewal + its tick
    job = recorded_queue.get_job(job_id)
    assert (job.status, job.attempts, job.result, job.completed_at) == (sq.JobStatus.CANCELLED, 1, None, None)
    assert job.cancelled_at is not None
    (event,) = recorder.of("cancelled")
    assert (event.job_id, event.requested_while_running) == (job_id, True)
    assert recorder.of("completed") == [] and recorder.of("retried") == []


def test_an_async_handler_is_cancelled_and_the_job_ends_cancelled_not_retried(recorded_queue, recorder):
    started, seen = threading.Event(), []

    @recorded_queue.task(name="embed", max_attempts=5)
    async def embed(payload, ctx):
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append(ctx.cancel_requested)
            raise

    job_id = recorded_queue.enqueue("embed", {})
    thread = run_in_thread(recorded_queue.worker(concurrency=2, **FAST), until_empty=True)
    assert started.wait(15)
    recorded_queue.cancel(job_id)
    thread.join(30)

    assert not thread.is_alive() and seen == [True]
    job = recorded_queue.get_job(job_id)
    assert (job.status, job.attempts) == (sq.JobStatus.CANCELLED, 1)
    assert job.last_error == "JobCancelledError: cancelled on request while its handler ran"
    assert [e.requested_while_running for e in recorder.of("cancelled")] == [True]
    assert recorder.of("retried") == [] and recorder.of("failed") == []


@pytest.mark.parametrize("kind", ["raises", "returns"])
def test_whatever_the_handler_does_after_the_request_the_job_is_cancelled(recorded_queue, kind):
    started = threading.Event()

    @recorded_queue.task(name="stubborn", max_attempts=5)
    def stubborn(payload, ctx):
        started.set()
        wait_until(lambda: ctx.cancel_requested, "the cancel request to reach the handler", interval=0.02)
        if kind == "raises":
            raise RuntimeError("stopped half way")
        return {"ignored": True}

    job_id = recorded_queue.enqueue("stubborn", {})
    thread = run_in_thread(recorded_queue.worker(concurrency=1, **FAST), until_empty=True)
    assert started.wait(15)
    recorded_queue.cancel(job_id)
    thread.join(30)

    job = recorded_queue.get_job(job_id)
    assert (job.status, job.attempts, job.result) == (sq.JobStatus.CANCELLED, 1, None)


def test_a_held_job_whose_cancel_came_before_its_handler_started_is_never_run(recorded_queue):
    """The request can reach a claimed job before a handler thread picks it up; the worker then
    records the cancel instead of running the handler (driven here through the worker's own
    handler step, as a handler thread would)."""
    ran = []
    recorded_queue.task(name="not_yet", max_attempts=5)(lambda payload, ctx: ran.append(ctx.job_id))
    job_id = recorded_queue.enqueue("not_yet", {})
    worker = recorded_queue.worker(concurrency=1, **FAST)
    try:
        (job,) = worker.core.outcomes.claim("default", worker.worker_id, 1)
        recorded_queue.cancel(job_id)
        held = worker.runs.held(job)
        assert worker.core.outcomes.renew([job]) == {job_id: True} and held.request_cancel()

        worker.runs._run_here(held)
    finally:
        worker.engine.dispose()

    assert ran == []
    view = recorded_queue.get_job(job_id)
    assert view.status is sq.JobStatus.CANCELLED
    assert view.last_error == "JobCancelledError: cancelled on request before its handler started"


def test_lease_recovery_ends_a_cancel_requested_job_cancelled(recorded_queue, recorder):
    job_id = recorded_queue.enqueue("send_email", {})
    (job,) = recorded_queue.claim(worker_id="vanished", lease=timedelta(microseconds=1))
    recorded_queue.cancel(job_id)

    assert recorded_queue.recover_expired() == [job_id]

    view = recorded_queue.get_job(job_id)
    assert (view.status, view.last_error) == (sq.JobStatus.CANCELLED, "claim lease expired after a cancel request")
    assert [e.status for e in recorder.of("recovered")] == [sq.JobStatus.CANCELLED]
    assert not recorded_queue.complete(job.id, job.claim_token)  # the vanished worker's late outcome


def test_a_cancel_requested_job_given_back_at_shutdown_ends_cancelled(recorded_queue, recorder):
    """And it is announced as cancelled (an observer counting cancellations hears it), while a
    job given back without a request is not."""
    job_id, other_id = recorded_queue.enqueue_many([{"task": "send_email", "payload": {}}] * 2)
    jobs = recorded_queue.claim(worker_id="w", limit=2)
    recorded_queue.cancel(job_id)

    assert recorded_queue.release(jobs) == [job_id, other_id]

    view = recorded_queue.get_job(job_id)
    assert (view.status, view.attempts) == (sq.JobStatus.CANCELLED, 1)
    assert recorded_queue.get_job(other_id).status is sq.JobStatus.PENDING
    assert [(e.job_id, e.task, e.attempt) for e in recorder.of("cancelled")] == [(job_id, "send_email", 1)]


def test_a_renewal_reports_which_held_jobs_someone_asked_to_cancel(recorded_queue):
    ids = recorded_queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(3)])
    jobs = recorded_queue.claim(worker_id="w", limit=3)
    recorded_queue.cancel(ids[1])

    assert recorded_queue.renew(jobs) == {ids[0]: False, ids[1]: True, ids[2]: False}
    assert recorded_queue.heartbeat(jobs) == set(ids)
