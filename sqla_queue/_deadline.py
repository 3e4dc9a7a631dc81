"""Client-side deadlines for database calls.

Server-side timeouts cannot help when the server (or a proxy, or the network) stops answering
while TCP stays up: the client waits in ``recv`` forever. A deadline here shuts the socket down
from another thread when it passes; the blocked call then fails at once with a connection
error, SQLAlchemy invalidates that connection, and the caller's retry logic takes over.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection


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
    fd = None if pgconn is None else pgconn.socket
    lock = threading.Lock()
    state = {"armed": True}

    def cut() -> None:
        with lock:
            if state["armed"]:
                _shutdown(fd)

    timer = threading.Timer(seconds, cut)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            state["armed"] = False  # the connection may go back to the pool after this
        timer.cancel()


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
