"""Handler threads start as jobs arrive (`HandlerThreads`): the first job starts one, each thread
that takes a job while more wait starts the next, up to ``concurrency``. A worker's first batch
never waits for the whole pool to start, jobs that must overlap still do, and a worker whose
jobs never overlap keeps only the threads it needed."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from sqla_queue.worker.runs import HandlerThreads

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
    # One claim handed over all six: one thread for the first, one per job that found more waiting.
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


def run_until_told(handlers: HandlerThreads, taken: list[object], release: threading.Event) -> None:
    """A handler thread's part of the protocol: take a job, start the next thread if more wait."""
    while (job := handlers.work.get()) is not None:
        if handlers.more_wanted():
            handlers.grow()
        taken.append(job)
        release.wait(10)


def pool_taking(limit: int, jobs: int, release: threading.Event, *, until_taken: int
                ) -> tuple[HandlerThreads, list[object]]:
    """A pool of at most `limit` threads given `jobs` jobs (0, 1, ...), grown from one thread
    as a worker's dispatch does, once `until_taken` of them are taken."""
    taken: list[object] = []
    handlers = HandlerThreads(limit, lambda h: run_until_told(h, taken, release))
    for job in range(jobs):
        handlers.work.put(job)
    handlers.grow()
    wait_until(lambda: len(taken) >= until_taken, f"{until_taken} jobs taken", timeout=10, interval=0.01)
    return handlers, taken


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
    release = threading.Event()
    release.set()  # each job returns at once
    handlers, taken = pool_taking(5, 6, release, until_taken=6)

    assert len(handlers.started()) == 2
    assert "could not start another handler thread" in caplog.text
    handlers.end()
    for thread in handlers.started():
        thread.join(10)
    assert sorted(taken) == [0, 1, 2, 3, 4, 5]


def test_a_run_that_can_start_no_thread_at_all_fails(monkeypatch):
    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    handlers = HandlerThreads(5, lambda h: None)
    handlers.work.put(1)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        handlers.grow()
