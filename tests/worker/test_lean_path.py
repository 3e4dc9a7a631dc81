"""The per-job path carries no thread-synchronisation objects of its own: a held job has no
`threading.Event` (its cancel request is a flag its context reads), its `JobContext` is built
when a handler takes it, and handler threads take jobs from a C-level queue instead of waiting
on a `threading.Condition`."""

from __future__ import annotations

import gc
import threading
import time
from datetime import timedelta

import pytest

import sqla_queue as sq
from sqla_queue import types
from sqla_queue.worker.held_job import HeldJob

FAST = {"poll_interval": 0.05, "lease": timedelta(seconds=6)}
JOBS = 200


@pytest.fixture
def noop_queue(queue):
    @queue.task(name="noop")
    def noop(payload, ctx):
        return None

    queue.enqueue_many([{"task": "noop", "payload": {"n": n}} for n in range(JOBS)])
    return queue


def test_a_drain_makes_no_event_or_condition_per_job(noop_queue, monkeypatch):
    made = {"Event": 0, "Condition": 0}
    for name in made:
        original = getattr(threading, name)

        class Counting(original):  # type: ignore[valid-type, misc]
            def __init__(self, *args, _name=name, **kwargs):
                made[_name] += 1
                super().__init__(*args, **kwargs)

        monkeypatch.setattr(threading, name, Counting)

    summary = noop_queue.worker(concurrency=4, **FAST).run(until_empty=True)

    assert summary.completed == JOBS
    # The worker's own (stop, wake-up, thread start-up, connecting) are a few dozen whatever
    # the number of jobs; one per job would be at least JOBS.
    assert made["Event"] < JOBS // 4, made
    assert made["Condition"] < JOBS // 4, made


def test_a_drain_leaves_no_job_for_the_cyclic_garbage_collector(noop_queue):
    """Each held job and its context are freed by reference counting when the job is settled: a
    job in a reference cycle waits for the cyclic collector, whose passes grow with every
    object the process holds (they took a fifth of a busy worker's CPU)."""
    worker = noop_queue.worker(concurrency=4, **FAST)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        summary = worker.run(until_empty=True)
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, (HeldJob, types.JobContext, types.ClaimedJob))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()

    assert summary.completed == JOBS
    assert left == []


def test_handler_threads_never_wait_on_a_condition(noop_queue, monkeypatch):
    """Per job, a handler thread waits on nothing but its C-level queue. The one wait allowed
    is starting the next handler thread (`Thread.start` waits for it to run), once per thread."""
    waits: list[str] = []
    starting = threading.local()
    original_wait, original_start = threading.Condition.wait, threading.Thread.start

    def recording_wait(self, *args, **kwargs):
        if not getattr(starting, "now", False):
            waits.append(threading.current_thread().name)
        return original_wait(self, *args, **kwargs)

    def flagged_start(self):
        starting.now = True
        try:
            original_start(self)
        finally:
            starting.now = False

    monkeypatch.setattr(threading.Condition, "wait", recording_wait)
    monkeypatch.setattr(threading.Thread, "start", flagged_start)

    summary = noop_queue.worker(concurrency=4, **FAST).run(until_empty=True)

    assert summary.completed == JOBS
    assert [name for name in waits if name.startswith("sqla-queue-handler")] == []


def test_a_held_jobs_context_is_built_when_a_handler_takes_it_and_sees_cancel_requests(queue, monkeypatch):
    built: list[object] = []
    original = types.built

    def counting(cls, fields):
        instance = original(cls, fields)
        if cls is types.JobContext:
            built.append(instance)
        return instance

    monkeypatch.setattr(types, "built", counting)
    job_id = queue.enqueue("send_email", {"to": "a"}, idempotency_key="key-1")
    [job] = queue.claim(worker_id="w", limit=1)

    held = HeldJob(job, queue.get_task("send_email"))
    assert built == []

    ctx = held.handler_context()
    assert built == [ctx]
    assert (ctx.job_id, ctx.attempt, ctx.task, ctx.queue, ctx.idempotency_key, ctx.claim_token) == (
        job_id, 1, "send_email", "default", "key-1", job.claim_token)
    assert dict(ctx.meta) == {} and not ctx.is_async
    assert ctx.cancel_requested is False

    assert held.request_cancel() is True
    assert ctx.cancel_requested is True and held.cancel_requested
    assert held.request_cancel() is False
    with pytest.raises(RuntimeError, match="built by hand"):
        ctx.transaction()  # a held job made without a transaction factory, as here


def test_the_worker_gives_each_run_one_context_whose_transaction_works(queue, engine):
    from sqlalchemy import text

    seen: list[sq.JobContext] = []

    @queue.task(name="tx")
    def tx(payload, ctx):
        seen.append(ctx)
        with ctx.transaction() as session:
            session.execute(text("SELECT 1"))

    ids = queue.enqueue_many([{"task": "tx", "payload": {}}] * 3)
    summary = queue.worker(concurrency=2, **FAST).run(until_empty=True)

    assert summary.completed == 3
    assert sorted(ctx.job_id for ctx in seen) == sorted(ids)
    assert all(not ctx.cancel_requested for ctx in seen)


def test_a_handler_thread_that_frees_its_slot_runs_the_next_buffered_job_itself(queue, monkeypatch):
    """Jobs waiting in the buffer go to the thread whose handler just ended, without a wake-up
    through the queue: only jobs for handlers that were idle are put on it."""
    import queue as queue_module

    from sqla_queue.worker import runs

    put: list[object] = []

    class CountingQueue(queue_module.SimpleQueue):
        def put(self, item, *args, **kwargs):
            if item is not None:
                put.append(item)
            super().put(item, *args, **kwargs)

    monkeypatch.setattr(runs.queue_module, "SimpleQueue", CountingQueue)
    ran_on: dict[int, str] = {}

    @queue.task(name="short")
    def short(payload, ctx):
        ran_on[ctx.job_id] = threading.current_thread().name
        time.sleep(0.002)  # long enough for the buffer to hold jobs when a handler ends

    queue.enqueue_many([{"task": "short", "payload": {"n": n}} for n in range(JOBS)])
    summary = queue.worker(concurrency=4, prefetch=16, **FAST).run(until_empty=True)

    assert summary.completed == JOBS == len(ran_on)
    assert len(put) < JOBS // 2, len(put)
