"""Wake-ups for enqueues committed in our own transactions, sent after the commit.

A commit that carries a NOTIFY takes PostgreSQL's database-wide notify lock and holds it through
its WAL flush, so enqueues that notify commit one at a time: with 32 concurrent single-job
enqueuers, about half the throughput of the same INSERTs without it (docs/performance.md). An
enqueue whose transaction is ours (`Queue.enqueue` with neither session nor connection)
therefore commits without notifying and hands its queue names to this per-Queue notifier,
which sends them in one statement that does not wait for a flush (`sql.wake_queues`). The first
wake-up after a quiet spell goes out at once, from the enqueuing call itself (an idle worker
wakes as fast as with a NOTIFY in the transaction); later ones go from the notifier's thread
once `MIN_INTERVAL` has passed since the previous send, together, so a busy process sends at
most one notification per interval however many jobs it enqueues, and a job waits at most
that long for its wake-up (workers that are busy claim it sooner: they claim again as soon as
they have room). The wake-up still follows the commit, as a NOTIFY inside the transaction would.

Pending wake-ups are sent before the interpreter exits (a short script that enqueues and ends
still wakes the workers at once), and a forked child starts with none and a thread of its own.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable

logger = logging.getLogger("sqla_queue")

_NOTIFIERS: weakref.WeakSet[Notifier] = weakref.WeakSet()

MIN_INTERVAL = 0.01
"""Seconds between two notifications from one Queue's notifier (docs/how-to/run-workers.md)."""


class Notifier:
    """Sends ``send(sorted queue names)`` from a thread of its own, soon after `announce`."""

    def __init__(self, send: Callable[[list[str]], None]) -> None:
        self._send = send
        self._reset()
        _NOTIFIERS.add(self)

    def _reset(self) -> None:
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._sending = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_sent = float("-inf")

    def announce(self, queues: Iterable[str]) -> None:
        """Wake the workers of `queues`, whose jobs have just committed: at once, in the
        caller, after a quiet spell (so an idle worker wakes as fast as with a NOTIFY in the
        transaction); otherwise from the thread, with whatever else arrives meanwhile."""
        with self._lock:
            self._pending.update(queues)
        if self._sending.acquire(blocking=False):  # nobody is sending: maybe send it now, here
            try:
                if time.monotonic() - self._last_sent >= MIN_INTERVAL:
                    self._last_sent = time.monotonic()
                    self._send_pending()
                    return
            finally:
                self._sending.release()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="sqla-queue-notifier", daemon=True)
                self._thread.start()
        if not self._wake.is_set():  # set already: the thread has yet to take what is pending
            self._wake.set()

    def flush(self) -> None:
        """Send what is pending now, after any send in progress."""
        with self._sending:
            self._send_pending()

    def _send_pending(self) -> None:
        """With `_sending` held: one notification for every queue announced so far."""
        with self._lock:
            queues = sorted(self._pending)
            self._pending.clear()
        if not queues:
            return
        try:
            self._send(queues)
        except Exception as exc:  # the jobs are committed: workers still find them by polling
            logger.warning("could not wake the workers of %s (they find the jobs when they next poll): %s",
                           ", ".join(queues), type(exc).__name__)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            rest = self._last_sent + MIN_INTERVAL - time.monotonic()
            if rest > 0:
                time.sleep(rest)  # what is announced meanwhile goes out with this send
            self._wake.clear()
            with self._sending:
                self._last_sent = time.monotonic()
                self._send_pending()


def flush_all() -> None:
    """Send every Queue's pending wake-ups now (at exit, and where a process ends without it)."""
    for notifier in list(_NOTIFIERS):
        notifier.flush()


def _forget_in_child() -> None:
    """A forked child has none of the parent's threads, and its locks may be held forever."""
    for notifier in list(_NOTIFIERS):
        notifier._reset()


atexit.register(flush_all)
os.register_at_fork(after_in_child=_forget_in_child)
