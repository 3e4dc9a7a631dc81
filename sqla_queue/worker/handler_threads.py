"""A run's handler threads: started as its jobs arrive, at most ``concurrency``, and only as
many as the handlers keep busy.

Starting a thread waits for it to run (some 0.1 ms). All of them at once, before the first
job, kept a worker's first batch waiting for the whole pool (23 ms at concurrency 200). So the
first job starts one thread, and a thread that is about to run a job starts the next one when
jobs wait and *every other thread is inside a handler*: no thread is free to take the next
job. Handlers that wait (on the network, a lock, a sleep) stay inside, so the pool grows to
``concurrency`` as fast as jobs arrive; handlers that return within microseconds are almost
never all inside at once, so a few threads run them back to back. More threads would not run
them sooner (they share one interpreter lock) but would make the claim loop wait its turn
behind every one of them: two processes at concurrency 200 drained 20,000 no-op jobs 1.20x
sooner from process start with the pool kept to a few threads than with all 200 started
(docs/how-to/run-workers.md, "Many short jobs").

A thread that finds every other thread inside a handler is the one to grow the pool, and looks
again once the thread it started runs. Should every thread still end up inside while jobs wait
(the last two checks crossed), nobody is about to run a job: the claim loop checks between its
rests too (`HandlerThreads.grow_stalled`, at most `STALL_CHECK` apart while that lasts).
"""

from __future__ import annotations

import logging
import queue as queue_module
import threading
from collections.abc import Callable

from .held_job import HeldJob

logger = logging.getLogger("sqla_queue.worker")

STALL_CHECK = 0.01
"""Seconds between the claim loop's checks for jobs waiting while every handler thread is
inside a handler (only while that is so)."""


class HandlerThreads:
    """One run's handler threads (`target(handlers, index)` each), at most `concurrency`.

    ``inside[index]`` is True while thread `index` runs a handler; each thread writes only its
    own entry (`enter` and `leave`), so reading the list needs no lock."""

    def __init__(self, concurrency: int, target: Callable[[HandlerThreads, int], None]) -> None:
        # A C-level queue: handing a job over and waking a thread costs no Python-level lock
        # juggling. ``None`` tells one thread to end.
        self.work: queue_module.SimpleQueue[HeldJob | None] = queue_module.SimpleQueue()
        self.inside: list[bool] = []
        self._limit = concurrency
        self._target = target
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._ended = False

    def more_wanted(self) -> bool:
        """Jobs wait, the pool may grow and no thread is free to take them: every thread is
        inside a handler (none at all, at first). No lock: `grow` checks again."""
        return len(self._threads) < self._limit and not self.work.empty() and False not in self.inside

    def enter(self, index: int) -> None:
        """Thread `index` is about to run a handler: first start another thread if jobs wait
        and every other thread is inside one, and again once that one runs, while that holds.
        This one does not count as inside until then, so the thread it starts does not see it
        busy and start a third for no reason; the one it started, once inside a handler that
        waits, does count."""
        while len(self._threads) < self._limit and not self.work.empty() and self.inside.count(False) == 1:
            threads = len(self._threads)
            self.grow()
            if len(self._threads) == threads:  # full, ended or refused
                break
        self.inside[index] = True

    def leave(self, index: int) -> None:
        self.inside[index] = False

    def stalled(self) -> bool:
        """Jobs wait and every thread is inside a handler, with room for more threads."""
        return bool(self._threads) and self.more_wanted()

    def grow_stalled(self) -> None:
        """The claim loop's check: while jobs wait and every thread stays inside a handler,
        start a thread per waiting job (up to the limit)."""
        for _ in range(min(self.work.qsize(), self._limit - len(self._threads))):
            if not self.more_wanted():
                return
            self.grow()

    def grow(self) -> None:
        """Start one more thread, unless the pool is full or the run has ended. If the system
        refuses a thread (its limit on threads or memory), the run goes on with the threads it
        has; only a run with none at all fails, as it did when every thread started at once."""
        with self._lock:  # held while it starts: `started` never lists a thread not yet started
            if self._ended or len(self._threads) >= self._limit:
                return
            index = len(self._threads)
            self.inside.append(False)
            thread = threading.Thread(target=self._target, args=(self, index),
                                      name=f"sqla-queue-handler-{index}", daemon=True)
            try:
                thread.start()
            except RuntimeError as exc:
                self.inside.pop()
                if not self._threads:
                    raise
                self._limit = len(self._threads)
                logger.warning("worker: could not start another handler thread (%s); running jobs on the %d "
                               "it has", exc, self._limit)
                return
            self._threads.append(thread)

    def end(self) -> None:
        """No more threads; each one ends after the jobs handed over before (a stop signal
        apiece, behind them in the queue)."""
        with self._lock:
            self._ended = True
            count = len(self._threads)
        for _ in range(count):
            self.work.put(None)

    def started(self) -> list[threading.Thread]:
        with self._lock:
            return list(self._threads)
