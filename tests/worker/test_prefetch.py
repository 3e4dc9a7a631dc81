"""Prefetch: a worker holds claimed jobs beyond its concurrency in a local buffer, under lease
(docs/explanation/prefetch.md). Buffered jobs are ``running`` and renewed like the others; a
task's timeout counts from when a handler takes the job; a job buffered past the TTL, and every
buffered job at shutdown, goes back to ``pending`` with its attempt handed back; a worker killed
with buffered jobs loses none, and re-runs no more than it held."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from datetime import timedelta

import pytest
from click.testing import CliRunner
from sqlalchemy import text

import sqla_queue as sq
from sqla_queue.cli import main
from sqla_queue.errors import ConfigurationError
from sqla_queue.sql.lease import RELEASED, RETURNED_UNTAKEN
from sqla_queue.worker.slots import PREFETCH_PER_HANDLER, TARGET_WAIT, PrefetchSize

from waiting import wait_until

ROWS = "SELECT id, status, attempts, last_error FROM sqla_queue_jobs ORDER BY id"


class Gated:
    """A task whose handler records that it started, then waits for `gate` (set at teardown
    too, so no handler thread outlives its test)."""

    def __init__(self, queue: sq.Queue, name: str = "gated", **options) -> None:
        self.gate = threading.Event()
        self.started: list[int] = []

        @queue.task(name=name, **options)
        def gated(payload, ctx):
            self.started.append(ctx.job_id)
            self.gate.wait(30)


@pytest.fixture
def running_worker():
    """``start(worker)``: run it on a thread; stopped and joined at teardown."""
    started: list[tuple[sq.Worker, threading.Thread, list]] = []

    def start(worker, **run_options):
        summaries: list = []
        thread = threading.Thread(target=lambda: summaries.append(worker.run(**run_options)), daemon=True)
        thread.start()
        started.append((worker, thread, summaries))
        return thread, summaries

    yield start
    for worker, thread, _ in started:
        worker.stop()
        thread.join(timeout=30)


def rows(engine):
    with engine.connect() as conn:
        return conn.execute(text(ROWS)).all()


def statuses(engine) -> list[str]:
    return [row.status for row in rows(engine)]


def test_prefetched_jobs_are_claimed_running_and_renewed_before_a_handler_takes_them(queue, engine, running_worker):
    gated = Gated(queue)
    queue.enqueue_many([{"task": "gated", "payload": {}}] * 5)
    worker = queue.worker(concurrency=1, prefetch=3, lease=timedelta(seconds=1.5), poll_interval=0.1)
    running_worker(worker)
    try:
        # One claim takes concurrency + prefetch jobs; one handler runs, three wait in the buffer.
        wait_until(lambda: statuses(engine).count("running") == 4, "four jobs held")
        # The claim commits before its jobs reach the handler thread: wait for the one to start.
        wait_until(lambda: gated.started, "the handler to start")
        assert len(gated.started) == 1 and statuses(engine).count("pending") == 1
        with engine.connect() as conn:
            first = dict(conn.execute(text("SELECT id, lease_expires_at FROM sqla_queue_jobs "
                                           "WHERE status = 'running'")).all())
        # The lease keeper renews every held job (every lease / 3), the buffered ones too.
        def renewed() -> bool:
            with engine.connect() as conn:
                now = dict(conn.execute(text("SELECT id, lease_expires_at FROM sqla_queue_jobs "
                                             "WHERE id = ANY(:ids)"), {"ids": list(first)}).all())
            return all(now[job_id] > first[job_id] for job_id in first)

        wait_until(renewed, "every held job's lease to be renewed")
        assert len(gated.started) == 1
    finally:
        gated.gate.set()
    wait_until(lambda: statuses(engine) == ["completed"] * 5, "all five jobs to complete")
    assert [row.attempts for row in rows(engine)] == [1] * 5


def test_a_job_buffered_past_the_ttl_goes_back_pending_with_its_attempt_handed_back(queue, engine, running_worker):
    gated = Gated(queue)
    ids = queue.enqueue_many([{"task": "gated", "payload": {}}] * 3)
    worker = queue.worker(concurrency=1, prefetch=2, prefetch_ttl=0.3, poll_interval=0.1)
    thread, summaries = running_worker(worker)
    try:
        wait_until(lambda: statuses(engine).count("running") == 3, "three jobs held")
        queue.pause("default")  # the worker must not claim them straight back
        # The handler holds the first job; the two buffered ones go back untouched.
        wait_until(lambda: [(r.status, r.attempts) for r in rows(engine)[1:]] == [("pending", 0)] * 2,
                   "the buffered jobs to go back to pending")
        assert gated.started == [ids[0]]
        assert [r.last_error for r in rows(engine)[1:]] == [RETURNED_UNTAKEN] * 2
    finally:
        gated.gate.set()
    queue.resume("default")
    wait_until(lambda: statuses(engine) == ["completed"] * 3, "all three jobs to complete")
    assert [row.attempts for row in rows(engine)] == [1] * 3  # the returns did not count
    worker.stop()
    thread.join(timeout=30)
    assert summaries[0].released >= 2 and summaries[0].completed == 3


def test_shutdown_releases_buffered_jobs_without_counting_their_attempt(queue, engine, running_worker):
    gated = Gated(queue)
    ids = queue.enqueue_many([{"task": "gated", "payload": {}}] * 4)
    worker = queue.worker(concurrency=1, prefetch=3, shutdown_grace=30)
    thread, summaries = running_worker(worker)
    # Claimed is not started: a stop before the handler took the first job would release all four.
    wait_until(lambda: statuses(engine).count("running") == 4 and gated.started, "four jobs held, one started")
    worker.stop()
    gated.gate.set()  # the running handler finishes within the grace period
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert gated.started == [ids[0]]
    assert [(r.status, r.attempts) for r in rows(engine)] == [("completed", 1)] + [("pending", 0)] * 3
    assert [r.last_error for r in rows(engine)[1:]] == [RELEASED] * 3
    assert (summaries[0].completed, summaries[0].released) == (1, 3)


def test_a_task_timeout_counts_from_when_a_handler_takes_the_job(queue, engine, running_worker):
    """`first` holds the only handler for longer than `quick`'s timeout while `quick` waits in
    the buffer; `quick` then runs well within its timeout and completes. `overrun` (same
    timeout, a handler that takes longer) shows the timeout is enforced at all."""
    timeout = 0.6
    gated = Gated(queue, name="first")

    @queue.task(timeout=timeout, max_attempts=1)
    def quick(payload, ctx):
        time.sleep(payload["sleep"])

    queue.enqueue("first", {})
    quick_id = queue.enqueue("quick", {"sleep": 0.05})
    overrun_id = queue.enqueue("quick", {"sleep": 3 * timeout})
    worker = queue.worker(concurrency=1, prefetch=2, lease=timedelta(seconds=3), prefetch_ttl=30)
    running_worker(worker)
    try:
        wait_until(lambda: statuses(engine).count("running") == 3, "all three jobs held")
        claimed = time.monotonic()
        # Not synchronising: the buffered jobs must wait longer than their timeout, plus a
        # lease-keeper tick (lease / 12) in which a deadline counted from the claim would fire.
        time.sleep(timeout * 2 + 0.25)
        assert statuses(engine) == ["running"] * 3, "a buffered job timed out"
        assert time.monotonic() - claimed > timeout
    finally:
        gated.gate.set()
    wait_until(lambda: "running" not in statuses(engine) and "pending" not in statuses(engine),
               "every job to end")
    ended = {row.id: row for row in rows(engine)}
    assert ended[quick_id].status == "completed"
    assert ended[overrun_id].status == "failed"
    assert ended[overrun_id].last_error == f"TimeoutError: handler exceeded its timeout of {timeout:g}s"


@pytest.mark.parametrize(("batch_size", "held"), [(None, 500), (1000, 1000)])
def test_a_claim_takes_half_of_many_slots_unless_a_batch_size_is_given(queue, engine, running_worker,
                                                                       batch_size, held):
    """1,000 slots (one handler, 999 buffered): the first claim takes 500, so the round that
    carries it is half as long and the rest of a backlog is left to the next round or another
    worker; with ``batch_size`` the claim takes what it allows. The handler is held, so the
    buffer never runs low and no second claim comes."""
    gated = Gated(queue)
    queue.enqueue_many([{"task": "gated", "payload": {}}] * 1200)
    worker = queue.worker(concurrency=1, prefetch=999, batch_size=batch_size, poll_interval=0.1)
    running_worker(worker)
    try:
        wait_until(lambda: gated.started, "the handler to start")
        time.sleep(0.3)  # a second claim, if one came, would have committed by now
        assert statuses(engine).count("running") == held
    finally:
        gated.gate.set()
        worker.stop()


def test_the_adaptive_prefetch_holds_about_a_second_of_work():
    size = PrefetchSize(concurrency=10, fixed=None)
    assert size.size() == 0  # nothing known yet: nothing prefetched
    size.observe(0.5)
    assert size.size() == int(10 * TARGET_WAIT / 0.5) == 20
    for _ in range(100):
        size.observe(5.0)  # slow handlers: a small buffer
    assert size.size() == 2
    for _ in range(200):
        size.observe(0.0001)  # fast ones: capped
    assert size.size() == PREFETCH_PER_HANDLER * 10
    # Every handler busy for 20 s with its current job: no prefetch, whatever the past said.
    assert size.size(stalled_for=20.0) == 0
    assert PrefetchSize(concurrency=10, fixed=7).size(stalled_for=20.0) == 7


def test_prefetch_options_are_validated(queue):
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ConfigurationError, match="prefetch"):
            queue.worker(prefetch=bad)
    with pytest.raises(ConfigurationError, match="prefetch_ttl"):
        queue.worker(prefetch_ttl=0)
    assert queue.worker(prefetch=0).config.prefetch == 0


def test_the_cli_passes_prefetch_on(monkeypatch):
    seen: dict = {}

    class Probe:
        def worker(self, **options):
            seen.update(options)
            raise SystemExit(0)

    monkeypatch.setattr("sqla_queue.cli.root.CliContext.queue", lambda self: Probe())
    # --queues: the probe has no tasks for the worker to find its queues from
    result = CliRunner().invoke(main, ["--app", "x:y", "worker", "--processes", "1", "--queues", "default",
                                       "--prefetch", "7", "--prefetch-ttl", "250ms"])
    assert result.exit_code == 0, result.output
    assert (seen["prefetch"], seen["prefetch_ttl"]) == (7, 0.25)
    monkeypatch.setenv("SQLA_QUEUE_PREFETCH", "3")
    CliRunner().invoke(main, ["--app", "x:y", "worker", "--processes", "1", "--queues", "default"])
    assert seen["prefetch"] == 3


# -- a worker process killed with a full buffer ------------------------------------------------

JOBS = 1_500
CONCURRENCY = 4
PREFETCH = 24
LEASE = 2.0


@pytest.mark.slow
def test_sigkill_with_a_full_buffer_loses_nothing_and_reruns_at_most_what_it_held(fault_app, session_app_url):
    app = fault_app(session_app_url)
    app.enqueue(JOBS, sleep=0.01)
    options = ("--concurrency", str(CONCURRENCY), "--prefetch", str(PREFETCH), "--lease", str(LEASE),
               "--poll-interval", "0.2")
    victim = app.start_worker(*options)
    app.wait_until(lambda: app.completed() >= 200, 60, "the drain to be under way")
    victim.signal(signal.SIGKILL)
    victim.process.wait(timeout=10)
    # Claimed but not completed when it died: in a handler, finished but not yet flushed, or
    # buffered. Frozen now: nothing else holds these claims.
    held_at_kill = app.scalar("SELECT count(*) FROM sqla_queue_jobs WHERE status = 'running'")
    completed_at_kill = app.completed()
    assert 0 < held_at_kill <= CONCURRENCY + PREFETCH
    assert completed_at_kill < JOBS, "the work ended before the kill"

    survivor = app.start_worker(*options)
    app.wait_all_completed(JOBS, timeout=120)
    figures = app.check_invariants(JOBS, max_duplicates=held_at_kill)
    # Recovery counted the interrupted attempt of each job the dead worker held.
    second_attempts = app.scalar("SELECT count(*) FROM sqla_queue_jobs WHERE attempts = 2")
    assert second_attempts == held_at_kill, (second_attempts, held_at_kill)
    survivor.signal(signal.SIGTERM)
    assert survivor.process.wait(timeout=30) == 0, app.logs()
    print(f"\nprefetch crash: held at kill {held_at_kill}, completed at kill {completed_at_kill}, {figures}")


def test_a_job_claimed_back_while_its_old_claim_runs_gives_the_old_claim_up(queue, engine, running_worker):
    """Recovery takes a running job from the worker (its lease ran out) and the worker, with
    room in its buffer, claims it again: it now holds two claims of one job. The old one is
    lost: reported, its coroutine cancelled, and the new claim runs and completes."""
    lost = []

    class Spy:
        @sq.hookimpl
        def sqla_queue_lost_claim(self, event):
            lost.append(event)

    queue.plugin_manager.register(Spy())
    attempts, cancelled, tokens = [], [], []

    @queue.task(name="sleepy")
    async def sleepy(payload, ctx):
        attempts.append(ctx.attempt)
        tokens.append(ctx.claim_token)
        if ctx.attempt == 1:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.append(ctx.claim_token)
                raise

    job_id = queue.enqueue("sleepy", {})
    worker = queue.worker(concurrency=1, prefetch=2, poll_interval=0.05, lease=timedelta(seconds=30))
    running_worker(worker)
    wait_until(lambda: attempts == [1], "the first attempt to start")
    [first_token] = tokens
    with engine.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET lease_expires_at = clock_timestamp() WHERE id = :id"),
                     {"id": job_id})
    queue.recover_expired()  # or the worker's own recovery pass, whichever looks first

    wait_until(lambda: queue.get_job(job_id).status is sq.JobStatus.COMPLETED, "the second claim to complete it")
    assert cancelled == [first_token] and attempts == [1, 2]
    assert [(e.job_id, e.claim_token, e.operation) for e in lost] == [(job_id, first_token, "fence")]
    assert "claimed the job again" in lost[0].reason
    assert queue.get_job(job_id).attempts == 2
