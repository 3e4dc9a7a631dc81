"""Handler threads start as jobs arrive (`HandlerThreads`): the first job starts one, a thread about
to run a job starts the next when jobs wait and every other thread is inside a handler, and the
claim loop starts one per waiting job when all of them stay inside; never more than
``concurrency``. A worker's first batch never waits for the whole pool to start, jobs that must
overlap still do, and jobs that never overlap (one after another, or too short to) keep only the
threads they needed."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from sqla_queue.worker.handler_threads import HandlerThreads

from waiting import wait_until

FAST = {"poll_interval": 0.05, "lease": timedelta(seconds=6)}


def test_jobs_that_must_overlap_get_a_thread_each_and_no_more(queue):
    together = threading.Barrier(6, timeout=10)  # breaks (and the jobs fail) unless all 6 run at once
    ran_on: list[str] = []

    @queue.task(name="meet")
    def meet(payload, ctx):
        ran_on.append(threading.current_thread().name)
        together.wait()

    queue.enqueue_many([{"task": "meet", "payload": {"n": n}} for n in range(6)])
    worker = queue.worker(concurrency=20, **FAST)
    summary = worker.run(until_empty=True)

    assert summary.completed == 6 and summary.retried == 0
    assert len(set(ran_on)) == 6
    # One claim handed over all six; the threads that took the first ones waited inside their
    # handlers, so the rest each got a thread, and no thread was started for a job not there.
    assert len(worker.runs.threads) == 6


def test_jobs_one_after_another_keep_one_thread(queue):
    ran_on: list[str] = []

    @queue.task(name="alone")
    def alone(payload, ctx):
        ran_on.append(threading.current_thread().name)

    worker = queue.worker(concurrency=20, **FAST)
    for n in range(3):  # one job per run of the worker: never two waiting at once
        queue.enqueue("alone", {"n": n})
        assert worker.run(until_empty=True).completed == n + 1  # the summary counts every run
        assert len(worker.runs.threads) == 1
    assert len(ran_on) == 3


def test_jobs_too_short_to_overlap_keep_a_few_threads(queue):
    """Two thousand no-op jobs on 50 slots: jobs wait all the time (the claim hands over 50 at a
    time), but a handler that returns at once is almost never running when the next job is
    taken, so the pool stays far below its limit (before, every slot got its thread)."""

    @queue.task(name="quick")
    def quick(payload, ctx):
        return None

    queue.enqueue_many([{"task": "quick", "payload": {"n": n}} for n in range(2000)])
    worker = queue.worker(concurrency=50, **FAST)
    assert worker.run(until_empty=True).completed == 2000
    assert 1 <= len(worker.runs.threads) <= 12


def run_until_told(handlers: HandlerThreads, index: int, taken: list[object], release: threading.Event) -> None:
    """A handler thread's part of the protocol: take a job, enter (which starts the next thread
    if jobs wait and every other thread is inside), run it until released, leave."""
    while (job := handlers.work.get()) is not None:
        handlers.enter(index)
        taken.append(job)
        release.wait(10)
        handlers.leave(index)


def pool_taking(limit: int, jobs: int, release: threading.Event, *, until_taken: int
                ) -> tuple[HandlerThreads, list[object]]:
    """A pool of at most `limit` threads given `jobs` jobs (0, 1, ...), grown from one thread
    as a worker's dispatch does, once `until_taken` of them are taken."""
    taken: list[object] = []
    handlers = HandlerThreads(limit, lambda h, index: run_until_told(h, index, taken, release))
    for job in range(jobs):
        handlers.work.put(job)
    handlers.grow()

    def taken_enough() -> bool:
        handlers.grow_stalled()  # the claim loop's check between its rests
        return len(taken) >= until_taken

    wait_until(taken_enough, f"{until_taken} jobs taken", timeout=10, interval=0.01)
    return handlers, taken


def test_a_thread_about_to_run_a_job_starts_another_only_when_no_thread_is_free():
    release = threading.Event()
    handlers = HandlerThreads(4, lambda h, index: run_until_told(h, index, [], release))
    handlers.inside.extend([True, False])  # as if two threads ran: one inside a handler, one free
    handlers._threads.extend([threading.current_thread()] * 2)
    handlers.work.put("waiting")
    assert not handlers.more_wanted() and not handlers.stalled()
    handlers.enter(1)  # the free one takes a job: the other is busy, and one more job waits
    assert len(handlers.started()) == 3 and handlers.inside[:2] == [True, True]
    release.set()
    handlers.end()
    handlers.started()[2].join(10)


def test_the_pool_never_grows_past_its_limit_nor_after_its_end():
    release = threading.Event()
    handlers, taken = pool_taking(3, 5, release, until_taken=3)

    assert len(handlers.started()) == 3 and not handlers.more_wanted()  # full, though two jobs wait
    handlers.grow()
    assert len(handlers.started()) == 3

    handlers.end()
    release.set()
    for thread in handlers.started():
        thread.join(10)
    assert not any(thread.is_alive() for thread in handlers.started())
    assert sorted(taken) == [0, 1, 2, 3, 4]  # the waiting jobs ran before each thread's end
    handlers.work.put("late")
    handlers.grow()
    assert len(handlers.started()) == 3


def test_a_refused_thread_stops_the_growth_and_loses_no_job(monkeypatch, caplog):
    started = 0
    original = threading.Thread.start

    def at_most_two(self):
        nonlocal started
        if self.name.startswith("sqla-queue-handler") and started >= 2:
            raise RuntimeError("can't start new thread")
        started += 1
        original(self)

    monkeypatch.setattr(threading.Thread, "start", at_most_two)
    release = threading.Event()  # the jobs wait inside their handlers: the pool wants to grow
    handlers, taken = pool_taking(5, 6, release, until_taken=2)
    wait_until(lambda: (handlers.grow_stalled(), "could not start another handler thread" in caplog.text)[1],
               "the refusal logged", timeout=10, interval=0.01)
    release.set()
    wait_until(lambda: len(taken) == 6, "every job taken by the two threads", timeout=10, interval=0.01)

    assert len(handlers.started()) == 2
    handlers.end()
    for thread in handlers.started():
        thread.join(10)
    assert sorted(taken) == [0, 1, 2, 3, 4, 5]


def test_a_run_that_can_start_no_thread_at_all_fails(monkeypatch):
    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    handlers = HandlerThreads(5, lambda h, index: None)
    handlers.work.put(1)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        handlers.grow()
