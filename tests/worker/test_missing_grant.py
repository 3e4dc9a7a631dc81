"""A worker whose database role lacks a grant (docs/how-to/database-roles.md) stops with
`sq.PermissionDeniedError` instead of retrying forever, whichever of its parts the database
refused: the claim loop, a periodic service (pruning, the per-minute sample), the lease keeper
or the recording of an outcome. Each test takes a privilege away from the page's worker role
and waits for the worker to stop by itself; one that retried instead would never stop."""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import timedelta

import pytest

import sqla_queue as sq
from sqla_queue.services.pruning import PruneConfig

from roles import Roles
from waiting import wait_until

STOPS_WITHIN = 60.0


@pytest.fixture
def roles(create_database):
    made = Roles(create_database())
    yield made
    made.drop()


class Handler:
    """A handler that says when it started, then waits to be let go and fails if told to."""

    def __init__(self, fail: bool = False) -> None:
        self.started = threading.Event()
        self.go = threading.Event()
        self.fail = fail

    def __call__(self, payload, ctx):
        self.started.set()
        self.go.wait(STOPS_WITHIN)
        if self.fail:
            raise ConnectionError("smtp timeout")


def stop_error(worker, *, before=None) -> BaseException:
    """Run `worker` (without `until_empty`) on a thread, call `before` once it runs, and return
    what its `run()` raised once it stopped by itself."""
    ended: dict[str, object] = {}

    def run() -> None:
        try:
            ended["summary"] = worker.run()
        except BaseException as exc:  # what the test is about
            ended["error"] = exc

    thread = threading.Thread(target=run, name="test-worker", daemon=True)
    thread.start()
    try:
        if before is not None:
            before()
        wait_until(lambda: not thread.is_alive(), "the worker to stop by itself", timeout=STOPS_WITHIN)
    finally:
        worker.stop()
        thread.join(STOPS_WITHIN)
    assert "error" in ended, f"the worker returned {ended.get('summary')} instead of raising"
    return ended["error"]


def stopping_record(caplog) -> logging.LogRecord:
    [record] = [r for r in caplog.records if "stopping: the database role lacks a privilege" in r.getMessage()]
    assert "docs/how-to/database-roles.md" in record.getMessage()
    return record


def test_a_worker_whose_role_cannot_claim_stops(roles, caplog):
    roles.run("roles", "producer", "logins")  # the producer's login, running a worker
    queue = roles.queue("producer")
    queue.task(queue="claims", name="work")(Handler())
    queue.enqueue("work", {})
    error = stop_error(queue.worker(queues=["claims"], poll_interval=0.05))
    assert isinstance(error, sq.PermissionDeniedError)
    assert "permission denied for table sqla_queue_jobs" in str(error)
    stopping_record(caplog)


def test_a_worker_told_to_prune_without_the_pruning_grant_stops(roles, caplog):
    roles.run("roles", "worker", "logins")  # not "worker: pruning"
    queue = roles.queue("worker")
    error = stop_error(queue.worker(queues=["pruned"], poll_interval=0.05,
                                    pruning=PruneConfig(completed_after=timedelta(days=7))))
    assert isinstance(error, sq.PermissionDeniedError)
    assert "permission denied for table sqla_queue_jobs" in str(error)
    stopping_record(caplog)


def test_a_worker_that_may_not_record_samples_stops(roles, caplog):
    roles.run("roles", "worker", "logins")
    roles.sql("REVOKE INSERT ON sqla_queue_jobs_samples FROM queue_worker")
    queue = roles.queue("worker")
    error = stop_error(queue.worker(queues=["sampled"], poll_interval=0.05, sample_interval=0.01))
    assert isinstance(error, sq.PermissionDeniedError)
    assert "permission denied for table sqla_queue_jobs_samples" in str(error)
    stopping_record(caplog)


def test_a_worker_whose_lease_renewal_is_refused_stops(roles, caplog):
    roles.run("roles", "worker", "logins")
    queue = roles.queue("worker")
    handler = Handler()
    queue.task(queue="leased", name="hold")(handler)
    queue.enqueue("hold", {})
    # One slot, held by the job: the claim loop runs no statement, recovery not for an hour, no
    # samples; renewing the lease (every second) is the only thing left to refuse. No prefetch:
    # a buffer with room would keep the claim loop claiming.
    worker = queue.worker(queues=["leased"], concurrency=1, prefetch=0, lease=timedelta(seconds=3), recovery_interval=3600,
                          sample_interval=None, shutdown_grace=0.1, poll_interval=0.05)
    # The periodic passes first run after the first claim (start-up): wait for that one pass
    # of recovery before taking the grant away, so only the renewal is left to be refused.
    first_passes = threading.Event()
    run_due = worker.claim_loop.periodic.run_due
    worker.claim_loop.periodic.run_due = lambda: (run_due(), first_passes.set())

    def take_update_away() -> None:
        assert handler.started.wait(STOPS_WITHIN)
        assert first_passes.wait(STOPS_WITHIN)
        roles.sql("REVOKE UPDATE ON sqla_queue_jobs FROM queue_worker")

    try:
        error = stop_error(worker, before=take_update_away)
    finally:
        handler.go.set()
    assert isinstance(error, sq.PermissionDeniedError)
    assert "permission denied for table sqla_queue_jobs" in str(error)
    assert stopping_record(caplog).threadName == "sqla-queue-lease"
    assert not [r for r in caplog.records if "lease renewal failed" in r.getMessage()]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_worker_that_cannot_record_an_outcome_stops(roles, caplog, kind):
    roles.run("roles", "worker", "logins")
    queue = roles.queue("worker")
    handler = Handler(fail=True)
    if kind == "sync":
        queue.task(queue="recorded", name="bounce")(handler)
    else:  # its failure is recorded on the outcome thread, off the event loop

        @queue.task(queue="recorded", name="bounce")
        async def bounce(payload, ctx):
            await asyncio.to_thread(handler, payload, ctx)

    queue.enqueue("bounce", {})
    worker = queue.worker(queues=["recorded"], concurrency=1, sample_interval=None, poll_interval=0.05)

    def take_counting_away() -> None:  # a retry is counted in the retry's own transaction
        assert handler.started.wait(STOPS_WITHIN)
        roles.sql("REVOKE INSERT ON sqla_queue_jobs_counters FROM queue_worker")
        handler.go.set()

    error = stop_error(worker, before=take_counting_away)
    assert isinstance(error, sq.PermissionDeniedError)
    assert "permission denied for table sqla_queue_jobs_counters" in str(error)
    thread = "sqla-queue-handler" if kind == "sync" else "sqla-queue-outcomes"
    assert stopping_record(caplog).threadName.startswith(thread)
    assert not [r for r in caplog.records if "could not record outcome" in r.getMessage()
                and "retrying" in r.getMessage()]
