"""Client-side deadlines for database calls.

Server-side timeouts cannot help when the server (or a proxy, or the network) stops answering
while TCP stays up: the client waits in ``recv`` forever. A deadline here shuts the socket down
from another thread when it passes; the blocked call then fails at once with a connection
error, SQLAlchemy invalidates that connection, and the caller's retry logic takes over.

One watchdog thread serves every deadline in the process: arming and disarming one is a dict
operation under a lock, cheap enough for every call on the claim and completion hot path.
"""

from __future__ import annotations

import heapq
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection


class _Watchdog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: dict[int, int | None] = {}  # ticket -> socket fd
        self._heap: list[tuple[float, int]] = []
        self._tickets = itertools.count()
        self._wakeup = threading.Event()
        self._thread: threading.Thread | None = None

    def arm(self, fd: int | None, seconds: float) -> int:
        due = time.monotonic() + seconds
        with self._lock:
            ticket = next(self._tickets)
            self._armed[ticket] = fd
            first = not self._heap or due < self._heap[0][0]
            heapq.heappush(self._heap, (due, ticket))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="sqla-queue-deadlines", daemon=True)
                self._thread.start()
        if first:
            self._wakeup.set()
        return ticket

    def disarm(self, ticket: int) -> None:
        """After this returns the socket is never cut for `ticket` (the connection may go back
        to the pool and serve someone else)."""
        with self._lock:
            self._armed.pop(ticket, None)

    def _run(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                while self._heap and (self._heap[0][0] <= now or self._heap[0][1] not in self._armed):
                    _, ticket = heapq.heappop(self._heap)
                    fd = self._armed.pop(ticket, None)
                    if fd is not None:
                        _shutdown(fd)  # under the lock: disarm cannot race past a cut
                wait = self._heap[0][0] - now if self._heap else None
            self._wakeup.wait(wait)
            self._wakeup.clear()


_watchdog = _Watchdog()


@contextmanager
def deadline(connection: Connection, seconds: float | None) -> Iterator[None]:
    """Cut `connection`'s socket if the body has not finished within `seconds`."""
    with driver_deadline(connection.connection.driver_connection, seconds):
        yield


@contextmanager
def driver_deadline(driver_connection: object, seconds: float | None) -> Iterator[None]:
    """The same for a raw psycopg connection (used where SQLAlchemy has not wrapped it yet)."""
    if seconds is None:
        yield
        return
    pgconn = getattr(driver_connection, "pgconn", None)
    ticket = _watchdog.arm(None if pgconn is None else pgconn.socket, seconds)
    try:
        yield
    finally:
        _watchdog.disarm(ticket)


def _shutdown(fd: int | None) -> None:
    if fd is None or fd < 0:
        return
    try:
        # fromfd() duplicates the descriptor; shutdown() acts on the shared socket, which is the
        # point, and closing the duplicate leaves the driver's descriptor to the driver.
        with socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
