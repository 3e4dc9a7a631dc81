"""The sqla_queue application the benchmark drives: one no-op task on queue ``bench``.

Entry-point plugins are not loaded (``load_entrypoints=False``): the figures are the library's
own, not those of whatever plugins the environment happens to have installed. The built-in
plugins (default strategies, logging) stay, as in any application.
"""

from __future__ import annotations

import logging
import threading
import time

import sqla_queue as sq

from .raw_sql import QUEUE, TASK


class CompletionCounter:
    """Counts completions through the library's own lifecycle hook, into a shared integer the
    parent process samples (the sustained drain's windows)."""

    def __init__(self, shared) -> None:
        self.shared = shared
        self._lock = threading.Lock()

    @sq.hookimpl
    def sqla_queue_job_completed(self, event) -> None:
        with self._lock:
            self.shared.value += 1


class HandlerStarts:
    """Records ``(payload t0, handler start)`` on ``time.monotonic()``, which on Linux is one
    clock for every process (CLOCK_MONOTONIC), so the enqueuing parent's t0 compares directly."""

    def __init__(self) -> None:
        self.starts: list[tuple[float, float]] = []

    def record(self, payload: dict) -> None:
        self.starts.append((payload["t0"], time.monotonic()))


def make_queue(url: str, *, counter=None, starts: HandlerStarts | None = None) -> sq.Queue:
    logging.getLogger("sqla_queue").setLevel(logging.WARNING)
    plugins = [CompletionCounter(counter)] if counter is not None else []
    queue = sq.Queue(url, load_entrypoints=False, plugins=plugins)

    if starts is None:
        @queue.task(name=TASK, queue=QUEUE)
        def noop(payload: dict, ctx: sq.JobContext) -> None:
            return None
    else:
        @queue.task(name=TASK, queue=QUEUE)
        def timed(payload: dict, ctx: sq.JobContext) -> None:
            starts.record(payload)

    return queue
