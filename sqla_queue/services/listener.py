"""LISTEN/NOTIFY wake-ups for a worker, on a connection of its own.

A `Service` (`sqla_queue.services`): a `ListenerConfig` validated when it is built;
`Listener.run_once()`, one LISTEN session (connect, listen, wake the claim loop on every
notification for its queues, probe the connection now and then) that returns a `ListenResult`
when it ends; `run_if_due()`, the session its thread's `Looper` starts, after a pause that
grows after each failed one.

Notifications are a latency optimisation only: a missed one, or a listener that is down,
costs at most one poll interval, because the claim loop polls anyway. The connection is
probed every few seconds under the worker's call deadline, so a silently dead one is noticed
and replaced.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from dataclasses import dataclass

from .. import _validate
from ..core import Core
from ..errors import ConfigurationError

logger = logging.getLogger("sqla_queue.worker")


@dataclass(frozen=True)
class ListenerConfig:
    """:param queues: the queue names whose notifications wake the worker.
    :param call_timeout: the deadline (seconds) of LISTEN and of each probe.
    :param probe_every: seconds between two probes of an otherwise silent connection.
    :param reconnect_max: the longest pause (seconds) between failed sessions.
    :param wait: the longest wait (seconds) for a notification before the session looks at
        `done` and the probe again; `Listener.interrupt` ends a wait at once."""

    queues: tuple[str, ...]
    call_timeout: float
    probe_every: float = 5.0
    reconnect_max: float = 5.0
    wait: float = 0.5

    def __post_init__(self) -> None:
        if not isinstance(self.queues, tuple) or not self.queues:
            raise ConfigurationError(f"queues must be a non-empty tuple of queue names, got {self.queues!r}")
        names = tuple(_validate.as_config(_validate.name, queue, f"queues[{index}]")
                      for index, queue in enumerate(self.queues))
        object.__setattr__(self, "queues", names)
        for field in ("call_timeout", "probe_every", "reconnect_max", "wait"):
            value = _validate.as_config(_validate.positive_seconds, getattr(self, field), field)
            object.__setattr__(self, field, value)


@dataclass(frozen=True)
class ListenResult:
    """How one session ended: ``wakeups``, the notifications for our queues it passed on;
    ``error``, what broke the connection (None when the worker asked it to stop)."""

    wakeups: int = 0
    error: Exception | None = None


class Listener:
    """Wakes `wake` when a job is enqueued on one of `config.queues`, until `done` is set."""

    def __init__(self, core: Core, config: ListenerConfig, wake: threading.Event,
                 done: threading.Event) -> None:
        self.executor = core.executor
        self.config = config
        self.wake = wake
        self.done = done
        self.connected = threading.Event()
        self._failures = 0
        self._next_session = 0.0
        # A wait for notifications watches this socket pair too, so a stopping worker need not
        # wait out the rest of it (`interrupt`).
        self._interrupted, self._interrupter = socket.socketpair()
        self._interrupted.setblocking(False)

    def interrupt(self) -> None:
        """End the current wait for notifications now (set `done` first, or the session waits
        again): a worker that stops, or drained with ``until_empty``, exits without waiting out
        the rest of its listener's wait. Thread-safe; never raises."""
        try:
            self._interrupter.send(b"\0")
        except OSError:  # closed, or already full of unread wake-ups
            pass

    def close(self) -> None:
        """Release the socket pair (after the listener's thread has ended)."""
        self._interrupted.close()
        self._interrupter.close()

    def next_due(self) -> float | None:
        return None if self.done.is_set() else self._next_session

    def run_if_due(self) -> ListenResult | None:
        """A session, once the pause after a failed one has passed: the pause doubles up to
        ``reconnect_max`` (polling covers the gap)."""
        if self.done.is_set() or time.monotonic() < self._next_session:
            return None
        result = self.run_once()
        if result.error is None:
            self._failures = 0
            return result
        self._failures += 1
        delay = min(self.config.reconnect_max, 0.1 * 2**self._failures)
        logger.warning("listener: %s; reconnecting in %.1fs", type(result.error).__name__, delay)
        self._next_session = time.monotonic() + delay
        return result

    def run_once(self) -> ListenResult:
        """One LISTEN session, until `done` is set or the connection breaks; never raises."""
        wakeups = 0
        queues = frozenset(self.config.queues)
        executor = self.executor
        try:
            with executor.listening(self.config.call_timeout) as driver:
                self.connected.set()
                self.wake.set()  # anything enqueued while we were not listening is found now
                next_probe = time.monotonic() + self.config.probe_every
                while not self.done.is_set():
                    for note in driver.notifies(timeout=0):  # what has arrived, without waiting
                        if note.payload in queues:
                            wakeups += 1
                            self.wake.set()
                    self._wait_for_input(driver.fileno())
                    if time.monotonic() >= next_probe:
                        executor.probe(driver, self.config.call_timeout)  # is the connection alive?
                        next_probe = time.monotonic() + self.config.probe_every
        except Exception as exc:  # any failure ends the session; `run` decides when to retry
            return ListenResult(wakeups=wakeups, error=exc)
        finally:
            self.connected.clear()
        return ListenResult(wakeups=wakeups)

    def _wait_for_input(self, connection_fd: int) -> None:
        """Until the server sends something, `interrupt` is called or the wait is over."""
        ready, _, _ = select.select([connection_fd, self._interrupted], [], [], self.config.wait)
        if self._interrupted in ready:
            try:
                while self._interrupted.recv(64):
                    pass
            except BlockingIOError:
                pass
