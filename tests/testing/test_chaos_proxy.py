"""The fault proxy itself, on real sockets (an echo server behind it): clients that leave at once
never break it, and a slow upstream does not hold up other clients."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from sqla_queue.testing.chaos.proxy import TcpProxy


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept() -> None:
        server.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[:2]
    stop.set()
    thread.join()
    server.close()


def round_trip(proxy: TcpProxy, data: bytes = b"ping", timeout: float = 5.0) -> bytes:
    with socket.create_connection((proxy.host, proxy.port), timeout=timeout) as conn:
        conn.sendall(data)
        return conn.recv(4096)


def test_clients_that_leave_at_once_never_stop_the_proxy_accepting(echo):
    """A link whose client is gone before its second pump starts used to raise in the accept
    thread (a closed socket's setblocking), which then died: every later client timed out."""
    with TcpProxy(*echo) as proxy:
        for _ in range(300):
            socket.create_connection((proxy.host, proxy.port), timeout=5).close()
        assert round_trip(proxy) == b"ping"


def test_an_upstream_that_does_not_answer_does_not_hold_up_the_next_client(echo):
    """Each connection opens its upstream side on a thread of its own: the stuck one's connect
    (5 s to its timeout) used to block the accept loop, so the next client waited it out."""
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)  # never accepts: once one connection fills its queue, connecting hangs
    filler = socket.create_connection(full.getsockname()[:2], timeout=5)
    with TcpProxy(*full.getsockname()[:2]) as proxy:
        stuck = socket.create_connection((proxy.host, proxy.port), timeout=5)
        time.sleep(0.5)  # the proxy accepts it (every 50 ms) and starts its hanging connect
        proxy.target = echo  # the next connection goes where it is answered
        assert round_trip(proxy, b"next", timeout=2.0) == b"next"
        stuck.close()
    filler.close()
    full.close()
