"""The fault-injection proxy itself does what the fault tests rely on (against an echo server)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from proxy import TcpProxy


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
            except socket.timeout:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[:2]
    stop.set()
    thread.join()
    server.close()


@pytest.fixture
def proxy(echo) -> Iterator[TcpProxy]:
    with TcpProxy(*echo) as proxy:
        yield proxy


def connect(proxy: TcpProxy) -> socket.socket:
    return socket.create_connection((proxy.host, proxy.port), timeout=5)


def roundtrip(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    return sock.recv(4096)


def test_pass_forwards_both_ways(proxy):
    with connect(proxy) as sock:
        assert roundtrip(sock, b"ping") == b"ping"


def test_stall_holds_bytes_without_closing_and_heal_delivers_them(proxy):
    with connect(proxy) as sock:
        assert roundtrip(sock, b"before") == b"before"
        proxy.stall()
        sock.sendall(b"held")
        sock.settimeout(0.3)
        with pytest.raises(socket.timeout):  # no reply, and no EOF either: the socket stays open
            sock.recv(4096)
        proxy.heal()
        sock.settimeout(5)
        assert sock.recv(4096) == b"held"


def test_cut_closes_open_connections_and_new_ones_still_pass(proxy):
    with connect(proxy) as sock:
        assert roundtrip(sock, b"a") == b"a"
        assert proxy.cut() == 1
        try:
            assert sock.recv(4096) == b""
        except ConnectionResetError:
            pass
    with connect(proxy) as sock:
        assert roundtrip(sock, b"b") == b"b"


def test_refuse_closes_new_connections_at_accept_until_healed(proxy):
    open_before = connect(proxy)
    assert roundtrip(open_before, b"a") == b"a"
    proxy.refuse()
    with open_before, connect(proxy) as refused:
        for sock in (open_before, refused):
            try:
                assert sock.recv(4096) == b""
            except ConnectionResetError:
                pass
    assert proxy.refused == 1
    proxy.heal()
    with connect(proxy) as sock:
        assert roundtrip(sock, b"c") == b"c"


def test_clients_that_leave_at_once_never_stop_the_proxy_accepting(echo):
    """A link whose client is gone before its second pump starts used to raise in the accept
    thread (a closed socket's setblocking), which then died: every later client timed out."""
    with TcpProxy(*echo) as proxy:
        for _ in range(300):
            connect(proxy).close()
        with connect(proxy) as sock:
            assert roundtrip(sock, b"ping") == b"ping"


def test_an_upstream_that_does_not_answer_does_not_hold_up_the_next_client(echo):
    """Each connection opens its upstream side on a thread of its own: the stuck one's connect
    (5 s to its timeout) used to block the accept loop, so the next client waited it out."""
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)  # never accepts: once one connection fills its queue, connecting hangs
    filler = socket.create_connection(full.getsockname()[:2], timeout=5)
    with TcpProxy(*full.getsockname()[:2]) as proxy:
        stuck = connect(proxy)
        time.sleep(0.5)  # the proxy accepts it (every 50 ms) and starts its hanging connect
        proxy.target = echo  # the next connection goes where it is answered
        with socket.create_connection((proxy.host, proxy.port), timeout=2.0) as sock:
            assert roundtrip(sock, b"next") == b"next"
        stuck.close()
    filler.close()
    full.close()
