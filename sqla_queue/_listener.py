"""LISTEN/NOTIFY wake-ups for a worker, on a connection of its own.

Notifications are a latency optimisation only: a missed one, or a listener that is down,
costs at most one poll interval, because the claim loop polls anyway. The connection is
checked every few seconds under the worker's call deadline, so a silently dead one is noticed
and replaced.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING


if TYPE_CHECKING:
    from .queue import Queue

logger = logging.getLogger("sqla_queue.worker")

_CHECK_EVERY = 5.0
_RECONNECT_MAX = 5.0


class Listener:
    def __init__(
        self,
        queue: Queue,
        queues: tuple[str, ...],
        wake: threading.Event,
        done: threading.Event,
        *,
        call_timeout: float,
    ) -> None:
        self.queue = queue
        self.queues = frozenset(queues)
        self.wake = wake
        self.done = done
        self.call_timeout = call_timeout
        self.connected = threading.Event()

    def run(self) -> None:
        failures = 0
        while not self.done.is_set():
            try:
                self._listen_until_broken()
                failures = 0
            except Exception as exc:  # any failure: log, wait, reconnect; polling covers the gap
                self.connected.clear()
                failures += 1
                delay = min(_RECONNECT_MAX, 0.1 * 2**failures)
                logger.warning("listener: %s; reconnecting in %.1fs", type(exc).__name__, delay)
                self.done.wait(delay)

    def _listen_until_broken(self) -> None:
        executor = self.queue.executor
        with executor.listening(self.call_timeout) as driver:
            self.connected.set()
            self.wake.set()  # anything enqueued while we were not listening is found now
            next_check = time.monotonic() + _CHECK_EVERY
            while not self.done.is_set():
                for note in driver.notifies(timeout=0.5):
                    if note.payload in self.queues:
                        self.wake.set()
                if time.monotonic() >= next_check:
                    executor.probe(driver, self.call_timeout)  # is the connection alive?
                    next_check = time.monotonic() + _CHECK_EVERY
