"""Lost claims of ``async def`` handlers: while a handler awaits, its claim is taken (lease
recovery run by someone else with a tiny lease; or that, then another worker's claim). The
worker's heartbeat notices, reports the lost claim (``sqla_queue_lost_claim``, counted in
`WorkerSummary.lost`), and cancels the handler's coroutine at its ``await``: a thread could only
have its result ignored, a coroutine is stopped. Its outcome is never recorded over the new
owner's. Likewise when the worker gives the claim up itself: its leases cannot be renewed (the
network to the database stalls, on a server of the test's own behind `proxy.TcpProxy`), so it
fences the job (a lost claim, operation ``"fence"``) and cancels the coroutine.

Both ways of running async handlers: `Worker.run` (an event loop of the worker's own) and
`Worker.run_async` (the application's loop, here ``asyncio.run`` on a thread of the test's).
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

import sqla_queue as sq
from sqla_queue.worker.worker import Worker, WorkerSummary

from job_fixtures import EventRecorder
from waiting import wait_until

LEASE = timedelta(seconds=1.5)  # renewed every 0.5 s: the heartbeat notices soon
HANDLER_SLEEP = 60.0  # far longer than any wait below: an ended sleep was a cancelled one
WAIT = 20.0
APP_THREAD = "application-loop"


class Runner:
    """The worker on a thread: ``worker.run`` there, or ``asyncio.run(worker.run_async())``."""

    def __init__(self, worker: Worker, how: str, *, until_empty: bool = True) -> None:
        self.summary: WorkerSummary | None = None
        self.error: BaseException | None = None
        self.worker = worker
        self.how = how
        self.until_empty = until_empty
        self.thread = threading.Thread(target=self._main, name=APP_THREAD, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        try:
            if self.how == "run":
                self.summary = self.worker.run(until_empty=self.until_empty)
            else:
                self.summary = asyncio.run(self.worker.run_async(until_empty=self.until_empty))
        except BaseException as exc:  # reported by join()
            self.error = exc

    def join(self) -> WorkerSummary:
        self.thread.join(WAIT)
        if self.thread.is_alive():
            self.worker.stop()
            self.thread.join(WAIT)
            raise AssertionError("the worker did not return after the lost claim")
        if self.error is not None:
            raise self.error
        assert self.summary is not None
        return self.summary


@pytest.fixture
def setup(queue):
    """The queue with a lost-claim spy and an async task whose first attempt sleeps until
    cancelled; returns ``(queue, lost, runs, first_started)``, ``runs`` being what the handler
    saw (``started``: attempt, claim token and thread of each run; ``cancelled``, ``finished``:
    claim tokens)."""
    return prepare(queue)


def prepare(queue):
    lost = EventRecorder()
    queue.plugin_manager.register(lost)
    runs: dict[str, list] = {"started": [], "cancelled": [], "finished": []}
    first_started = threading.Event()

    @queue.task(name="sleepy", max_attempts=5)
    async def sleepy(payload, ctx):
        runs["started"].append((ctx.attempt, ctx.claim_token, threading.current_thread().name))
        if ctx.attempt > 1:
            return
        first_started.set()
        try:
            await asyncio.sleep(HANDLER_SLEEP)
        except asyncio.CancelledError:
            runs["cancelled"].append(ctx.claim_token)
            raise
        runs["finished"].append(ctx.claim_token)  # pragma: no cover - must never happen

    return queue, lost, runs, first_started


def start(queue, how: str, **options) -> Runner:
    worker = queue.worker(concurrency=1, poll_interval=0.05, lease=LEASE, shutdown_grace=1, **options)
    # The worker's periodic passes first run after its first claim (start-up): `recover_now`
    # waits for them, so the worker's own recovery never takes the job back before the test's.
    worker.first_passes = threading.Event()
    run_due = worker.claim_loop.periodic.run_due
    worker.claim_loop.periodic.run_due = lambda: (run_due(), worker.first_passes.set())
    return Runner(worker, how)


def recover_now(queue, job_id: int, runner: Runner) -> None:
    """The worker's lease of the job runs out now (as if it had stopped renewing), and recovery
    takes the running job back."""
    assert runner.worker.first_passes.wait(WAIT), "the worker's periodic passes did not run"

    def expire_and_recover() -> bool:
        with queue.engine.begin() as conn:
            conn.execute(text("UPDATE sqla_queue_jobs SET lease_expires_at = clock_timestamp() "
                              "WHERE id = :id AND status = 'running'"), {"id": job_id})
        return queue.recover_expired() == [job_id]

    wait_until(expire_and_recover, what=f"recovery to take job {job_id} back")


def just_renewed(queue, job_id: int) -> None:
    """Return right after the worker renewed the job's lease (its ``locked_at`` moved): the next
    heartbeat is a third of a lease away."""
    before = queue.get_job(job_id).locked_at
    wait_until(lambda: queue.get_job(job_id).locked_at != before, what=f"a renewal of job {job_id}'s lease")


def check_ran_where_it_should(runs, how: str) -> None:
    threads = {thread for _, _, thread in runs["started"]}
    if how == "run_async":
        assert threads == {APP_THREAD}, threads  # on the application's loop
    else:
        assert APP_THREAD not in threads, threads  # on the worker's own loop, not the claim loop's thread


@pytest.mark.parametrize("how", ["run", "run_async"])
def test_a_recovered_async_job_is_cancelled_reported_lost_and_run_again(setup, how):
    queue, lost, runs, first_started = setup
    job_id = queue.enqueue("sleepy", {})
    # No prefetch: the one slot stays held by the lost claim, so the heartbeat notices before the
    # worker could claim the job back (a worker with room does, and gives the old claim up then:
    # tests/worker/test_prefetch.py).
    runner = start(queue, how, prefetch=0)
    assert first_started.wait(WAIT), "the handler did not start"
    [(_, first_token, _)] = runs["started"]

    recover_now(queue, job_id, runner)
    wait_until(lambda: runs["cancelled"], what="the handler's coroutine to be cancelled")
    summary = runner.join()

    assert runs["cancelled"] == [first_token] and runs["finished"] == []
    assert [(e.job_id, e.claim_token, e.operation) for e in lost.of("lost_claim")] == [(job_id, first_token, "heartbeat")]
    assert "lease expired and the job was recovered" in lost.of("lost_claim")[0].reason
    # The slot came back and the job ran again under a claim of its own, which completed it.
    assert [attempt for attempt, _, _ in runs["started"]] == [1, 2]
    assert runs["started"][1][1] != first_token
    assert (summary.claimed, summary.completed, summary.lost) == (2, 1, 1)
    assert (summary.failed, summary.retried, summary.released) == (0, 0, 0)
    job = queue.get_job(job_id)
    assert job.status is sq.JobStatus.COMPLETED and job.attempts == 2
    check_ran_where_it_should(runs, how)


@pytest.mark.parametrize("how", ["run", "run_async"])
def test_an_async_job_claimed_by_another_worker_is_cancelled_and_left_to_it(setup, how):
    queue, lost, runs, first_started = setup
    job_id = queue.enqueue("sleepy", {})
    runner = start(queue, how)
    assert first_started.wait(WAIT), "the handler did not start"
    [(_, first_token, _)] = runs["started"]

    # Right after a renewal, the worker's only slot stays held by the lost job until its next
    # heartbeat (0.5 s): nobody but this claim can take the job back in between.
    just_renewed(queue, job_id)
    recover_now(queue, job_id, runner)
    [taken] = queue.claim(worker_id="another-worker")
    assert taken.id == job_id
    wait_until(lambda: runs["cancelled"], what="the handler's coroutine to be cancelled")
    summary = runner.join()

    assert runs["cancelled"] == [first_token] and runs["finished"] == []
    assert len(runs["started"]) == 1
    assert [(e.job_id, e.claim_token, e.operation) for e in lost.of("lost_claim")] == [(job_id, first_token, "heartbeat")]
    assert "claimed again" in lost.of("lost_claim")[0].reason
    assert (summary.claimed, summary.completed, summary.lost) == (1, 0, 1)
    assert (summary.failed, summary.retried, summary.released) == (0, 0, 0)
    # Nothing the cancelled handler's worker did touched the other worker's claim.
    job = queue.get_job(job_id)
    assert job.status is sq.JobStatus.RUNNING and job.attempts == 2
    assert queue.complete(job_id, taken.claim_token)
    check_ran_where_it_should(runs, how)


# On a PostgreSQL 18 of its own whatever the suite's server is: CI's PostgreSQL 15 pass skips it.
@pytest.mark.server_independent
@pytest.mark.parametrize("how", ["run", "run_async"])
def test_a_fenced_async_job_is_cancelled_and_runs_again_once_the_network_heals(own_server, proxy_factory, how):
    direct_url = own_server.create_database()
    proxy = proxy_factory(own_server.host, own_server.port)
    through_proxy = make_url(direct_url).set(host=proxy.host, port=proxy.port)
    engine = create_engine(through_proxy, poolclass=NullPool)
    direct = create_engine(direct_url, poolclass=NullPool)  # the test's reads, never stalled
    runner = None
    try:
        queue, lost, runs, first_started = prepare(sq.Queue(engine, load_entrypoints=False))
        observer = sq.Queue(direct, load_entrypoints=False)
        job_id = queue.enqueue("sleepy", {})
        # lease 2 s: call deadline 0.5 s, renewal every 0.67 s, fenced ~2 s into the stall
        worker = queue.worker(concurrency=1, poll_interval=0.05, lease=timedelta(seconds=2), shutdown_grace=1)
        worker.first_passes = threading.Event()  # see `start`: the stall comes after the first passes
        run_due = worker.claim_loop.periodic.run_due
        worker.claim_loop.periodic.run_due = lambda: (run_due(), worker.first_passes.set())
        runner = Runner(worker, how, until_empty=False)  # until_empty could end before recovery
        assert first_started.wait(WAIT), "the handler did not start"
        assert worker.first_passes.wait(WAIT), "the worker's periodic passes did not run"
        [(_, first_token, _)] = runs["started"]

        proxy.stall()
        try:
            wait_until(lambda: runs["cancelled"], what="the fenced handler's coroutine to be cancelled")
            assert [(e.job_id, e.claim_token, e.operation) for e in lost.of("lost_claim")] == [(job_id, first_token, "fence")]
            assert "lease could not be renewed" in lost.of("lost_claim")[0].reason
            assert observer.get_job(job_id).status is sq.JobStatus.RUNNING  # fencing writes nothing
        finally:
            proxy.heal()
        # The worker's own recovery takes the expired job back; its second attempt completes.
        wait_until(lambda: observer.get_job(job_id).status is sq.JobStatus.COMPLETED,
                 what=f"job {job_id} to be recovered and completed")
        worker.stop()
        summary = runner.join()
    finally:
        if runner is not None:
            runner.worker.stop()  # a failed test leaves no worker behind
            runner.thread.join(WAIT)
        engine.dispose()
        direct.dispose()

    assert runs["cancelled"] == [first_token] and runs["finished"] == []
    assert [attempt for attempt, _, _ in runs["started"]] == [1, 2]
    assert (summary.completed, summary.lost) == (1, 1)
    assert (summary.failed, summary.retried, summary.released) == (0, 0, 0)
    assert observer.get_job(job_id).attempts == 2
    check_ran_where_it_should(runs, how)
