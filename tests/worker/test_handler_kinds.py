"""Sync and ``async def`` handlers, one axis: the worker gives both the same outcomes (success,
retry, failure, timeout, shutdown), whether it runs with ``run()`` (async handlers on a loop of
its own) or ``await run_async()`` inside the caller's event loop. Where the kinds differ, the
difference is the point: a timed-out or shut-down coroutine is cancelled (a thread cannot be),
and async jobs share one thread instead of holding one each."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest

import sqla_queue as sq
from sqla_queue.errors import NonRetryableError

FAST = {"poll_interval": 0.05, "lease": timedelta(seconds=6)}


@pytest.fixture(params=["sync", "async"])
def kind(request) -> str:
    return request.param


@pytest.fixture(params=["run", "run_async"])
def run_worker(request) -> Callable[..., sq.WorkerSummary]:
    """``run_worker(worker, until_empty=True)``: `Worker.run`, or `Worker.run_async` awaited in
    a fresh event loop."""
    if request.param == "run":
        return lambda worker, **options: worker.run(**options)
    return lambda worker, **options: asyncio.run(worker.run_async(**options))


def handler(kind: str, body: Callable[[dict, sq.JobContext], None], wait: float = 0.0):
    """A handler of `kind` that runs ``body(payload, ctx)`` after waiting `wait` seconds (a
    thread sleeps; a coroutine awaits)."""
    if kind == "sync":
        def sync_handler(payload, ctx):
            time.sleep(wait)
            return body(payload, ctx)
        return sync_handler

    async def async_handler(payload, ctx):
        await asyncio.sleep(wait)
        return body(payload, ctx)
    return async_handler


def test_success_runs_each_job_once(queue, kind, run_worker):
    seen: list[tuple[int, int]] = []
    queue.task(name="work")(handler(kind, lambda payload, ctx: seen.append((payload["n"], ctx.attempt))))
    ids = queue.enqueue_many([{"task": "work", "payload": {"n": n}} for n in range(20)])

    summary = run_worker(queue.worker(concurrency=4, **FAST), until_empty=True)

    assert sorted(seen) == [(n, 1) for n in range(20)]
    assert (summary.claimed, summary.completed, summary.retried, summary.failed) == (20, 20, 0, 0)
    assert {queue.get_job(i).status for i in ids} == {sq.JobStatus.COMPLETED}


def test_a_failed_attempt_is_retried_then_completes(queue, kind, run_worker):
    def body(payload, ctx):
        if ctx.attempt == 1:
            raise ConnectionError("partner API down")

    queue.task(name="flaky", max_attempts=3, retry_delay=0)(handler(kind, body))
    job_id = queue.enqueue("flaky", {})

    summary = run_worker(queue.worker(concurrency=2, **FAST), until_empty=True)

    job = queue.get_job(job_id)
    assert (job.status, job.attempts, summary.retried, summary.completed) == (sq.JobStatus.COMPLETED, 2, 1, 1)


def test_a_non_retryable_error_fails_the_job_with_the_handlers_traceback(queue, kind, run_worker):
    def body(payload, ctx):
        raise NonRetryableError("bad address")

    queue.task(name="doomed", max_attempts=5)(handler(kind, body))
    job_id = queue.enqueue("doomed", {})

    summary = run_worker(queue.worker(concurrency=2, **FAST), until_empty=True)

    job = queue.get_job(job_id)
    assert (job.status, job.attempts, summary.failed) == (sq.JobStatus.FAILED, 1, 1)
    assert job.last_error == "NonRetryableError: bad address"
    assert "in body" in job.last_traceback and "worker.py" not in job.last_traceback.splitlines()[1]


def test_a_timed_out_handler_fails_its_attempt_and_a_coroutine_is_cancelled(queue, kind, run_worker):
    cancelled = threading.Event()
    finished = threading.Event()

    if kind == "sync":
        def slow(payload, ctx):
            time.sleep(1.5)  # a thread cannot be stopped: it runs on, its result ignored
            finished.set()
    else:
        async def slow(payload, ctx):
            try:
                await asyncio.sleep(30)
                finished.set()
            except asyncio.CancelledError:
                cancelled.set()
                raise

    queue.task(name="slow", timeout=0.3, max_attempts=1)(slow)
    job_id = queue.enqueue("slow", {})

    summary = run_worker(queue.worker(concurrency=1, **FAST), until_empty=True)

    job = queue.get_job(job_id)
    assert (job.status, summary.failed, summary.completed) == (sq.JobStatus.FAILED, 1, 0)
    assert job.last_error == "TimeoutError: handler exceeded its timeout of 0.3s"
    if kind == "async":
        assert cancelled.is_set() and not finished.is_set()
    else:
        assert not cancelled.is_set()


def test_shutdown_gives_running_handlers_the_grace_period_then_releases_the_rest(queue, kind, run_worker):
    """Short jobs finish within the grace period; a long one is released (a coroutine is
    cancelled, a thread is abandoned) and its attempt is not counted."""
    started = threading.Event()
    cancelled = threading.Event()

    def body(payload, ctx):
        return None

    queue.task(name="short")(handler(kind, body, wait=0.2))
    if kind == "sync":
        def long(payload, ctx):
            started.set()
            time.sleep(5)
    else:
        async def long(payload, ctx):
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise
    queue.task(name="long")(long)
    long_id = queue.enqueue("long", {})
    short_ids = queue.enqueue_many([{"task": "short", "payload": {}} for _ in range(2)])
    worker = queue.worker(concurrency=3, shutdown_grace=0.8, **FAST)
    threading.Thread(target=lambda: (started.wait(30), time.sleep(0.05), worker.stop()), daemon=True).start()

    summary = run_worker(worker)

    assert {queue.get_job(i).status for i in short_ids} == {sq.JobStatus.COMPLETED}
    released = queue.get_job(long_id)
    assert (released.status, released.attempts, summary.released) == (sq.JobStatus.PENDING, 0, 1)
    assert cancelled.is_set() == (kind == "async")


def test_sync_and_async_tasks_share_one_worker_and_async_jobs_share_one_thread(queue, run_worker):
    threads: dict[str, set[int]] = {"sync": set(), "async": set()}
    running = {"async": 0, "most": 0}
    lock = threading.Lock()

    def on_thread(kind):
        def body(payload, ctx):
            with lock:
                threads[kind].add(threading.get_ident())
        return body

    @queue.task
    async def gather(payload, ctx):
        on_thread("async")(payload, ctx)
        running["async"] += 1  # on the loop: no lock needed
        running["most"] = max(running["most"], running["async"])
        await asyncio.sleep(0.2)
        running["async"] -= 1

    queue.task(name="threaded")(handler("sync", on_thread("sync"), wait=0.05))
    queue.enqueue_many([{"task": "gather", "payload": {}} for _ in range(30)]
                       + [{"task": "threaded", "payload": {}} for _ in range(10)])

    summary = run_worker(queue.worker(concurrency=30, batch_size=30, **FAST), until_empty=True)

    assert summary.completed == 40
    assert len(threads["async"]) == 1  # every coroutine on the one event loop
    assert threading.get_ident() not in threads["sync"]
    assert running["most"] > 10  # many awaiting at once on that one thread


def test_a_sync_handler_returning_a_coroutine_has_it_awaited(queue, run_worker):
    ran: list[int] = []

    async def body(payload):
        await asyncio.sleep(0)
        ran.append(payload["n"])

    @queue.task
    def wraps_async(payload, ctx):
        return body(payload)  # a synchronous wrapper around async code

    job_id = queue.enqueue("wraps_async", {"n": 7})
    summary = run_worker(queue.worker(concurrency=1, **FAST), until_empty=True)

    assert ran == [7] and summary.completed == 1
    assert queue.get_job(job_id).status is sq.JobStatus.COMPLETED


# -- run_async inside an application's event loop -----------------------------------------


def test_run_async_runs_handlers_on_the_callers_loop_and_stops_on_cancellation(queue):
    """What a FastAPI lifespan does: start the worker as a task, cancel it at shutdown. The
    running job gets the grace period and completes; the worker stops claiming and the
    cancellation reaches the caller."""
    loops: list[asyncio.AbstractEventLoop] = []
    job_ids: list[int] = []
    release = asyncio.Event()

    @queue.task
    async def on_app_loop(payload, ctx):
        loops.append(asyncio.get_running_loop())
        await release.wait()

    async def app() -> tuple[sq.WorkerSummary, bool]:
        worker = queue.worker(concurrency=2, shutdown_grace=10, **FAST)
        task = asyncio.create_task(worker.run_async())
        job_ids.append(await asyncio.to_thread(queue.enqueue, "on_app_loop", {}))
        while not loops:
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.2)  # the worker drains: the handler is still running
        release.set()
        try:
            await task
        except asyncio.CancelledError:
            return worker.summary, True
        return worker.summary, False

    async def main():
        result = await app()
        return result, asyncio.get_running_loop()

    (summary, raised), loop = asyncio.run(main())

    assert raised, "cancelling run_async re-raises the cancellation"
    assert loops == [loop]
    assert (summary.completed, summary.released) == (1, 0)
    assert queue.get_job(job_ids[0]).status is sq.JobStatus.COMPLETED


def test_run_async_returns_when_stopped(queue):
    async def main() -> sq.WorkerSummary:
        worker = queue.worker(concurrency=1, **FAST)
        task = asyncio.create_task(worker.run_async())
        await asyncio.sleep(0.3)
        worker.stop()
        return await task

    assert asyncio.run(main()).claimed == 0


def test_a_worker_whose_jobs_are_all_async_starts_no_handler_thread(queue, run_worker):
    names: list[str] = []

    @queue.task
    async def only_async(payload, ctx):
        names.extend(thread.name for thread in threading.enumerate())

    queue.enqueue_many([{"task": "only_async", "payload": {}} for _ in range(5)])
    summary = run_worker(queue.worker(concurrency=50, **FAST), until_empty=True)

    assert summary.completed == 5
    assert not [name for name in names if name.startswith("sqla-queue-handler-")]


def test_a_handler_running_past_its_lease_keeps_the_job(queue, kind, run_worker, recorder):
    """The lease keeper renews a running coroutine's lease as it does a thread's: recovery
    (which this worker runs every second) never takes the job, and it completes on attempt 1."""
    queue.plugin_manager.register(recorder)
    queue.task(name="longer_than_the_lease")(handler(kind, lambda payload, ctx: None, wait=3.5))
    job_id = queue.enqueue("longer_than_the_lease", {})

    summary = run_worker(queue.worker(concurrency=2, poll_interval=0.05, lease=1.5, recovery_interval=1),
                         until_empty=True)

    job = queue.get_job(job_id)
    assert (job.status, job.attempts, summary.completed, summary.lost) == (sq.JobStatus.COMPLETED, 1, 1, 0)
    assert recorder.of("recovered") == [] and recorder.of("lost_claim") == []
