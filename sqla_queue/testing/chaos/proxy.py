"""A small TCP proxy for fault injection: threads and sockets, nothing else. The chaos runner
puts one between its workers and its server; the worker fault tests (tests/worker/) use it too.

Put it between workers and a PostgreSQL server and switch its mode while they run:

* ``pass``   — forward bytes both ways (the initial mode, and what `heal` returns to);
* ``cut``    — close every open connection now (new connections are still forwarded);
* ``stall``  — stop forwarding in both directions but keep every socket open: the client's
  kernel still ACKs, so only a client-side deadline notices. New connections are accepted and
  stalled too (a connect attempt sees no startup reply);
* ``refuse`` — close new connections as soon as they are accepted, and cut the open ones;
* ``heal``   — back to ``pass``; stalled connections resume where they stopped.

Bytes already read when a mode changes are still delivered, like packets in flight.
"""

from __future__ import annotations

import select
import socket
import threading

_TICK = 0.05


class TcpProxy:
    """Forward ``127.0.0.1:<port>`` to ``target``; ``with TcpProxy(...) as proxy:`` closes it."""

    def __init__(self, target_host: str, target_port: int, listen_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind((listen_host, 0))
        self._server.listen(128)
        self._server.settimeout(_TICK)
        self.host, self.port = self._server.getsockname()[:2]
        self.mode = "pass"
        self.accepted = 0
        self.refused = 0
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._links: set[_Link] = set()
        self._lock = threading.Lock()
        self._acceptor = threading.Thread(target=self._accept_loop, name="proxy-accept", daemon=True)
        self._acceptor.start()

    # -- modes ------------------------------------------------------------------------

    def cut(self) -> int:
        """Close every open connection; returns how many were cut."""
        with self._lock:
            links, self._links = list(self._links), set()
        for link in links:
            link.close()
        return len(links)

    def stall(self) -> None:
        self.mode = "stall"
        self._flowing.clear()

    def refuse(self) -> int:
        self.mode = "refuse"
        self._flowing.set()
        return self.cut()

    def heal(self) -> None:
        self.mode = "pass"
        self._flowing.set()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._links)

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        self.cut()
        self._server.close()
        self._acceptor.join(timeout=2)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.mode == "refuse":
                self.refused += 1
                _close(client)
                continue
            # A thread per connection opens the upstream side: a server that is restarting
            # must not hold up the accepts of every other client behind it.
            threading.Thread(target=self._link, args=(client,), name="proxy-link", daemon=True).start()

    def _link(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=5)
            client.setblocking(True)
            upstream.setblocking(True)
        except OSError:  # the server is down, or the client is already gone
            _close(client)
            return
        if self.mode == "refuse":  # refused while this connection was being made
            self.refused += 1
            _close(client)
            _close(upstream)
            return
        self.accepted += 1
        link = _Link(client, upstream, self._flowing, self._closed, self._forget)
        with self._lock:
            self._links.add(link)
        link.start()

    def _forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)


class _Link:
    """One proxied connection: a pump thread per direction."""

    def __init__(self, client, upstream, flowing: threading.Event, closed: threading.Event, forget) -> None:
        self.client = client
        self.upstream = upstream
        self._flowing = flowing
        self._proxy_closed = closed
        self._forget = forget
        self._done = threading.Event()
        self._closing = threading.Lock()

    def start(self) -> None:
        """Both pumps get their sockets as they are now: the first may close the link (its peer
        left at once) before the second starts, and must not break it."""
        for src, dst, name in ((self.client, self.upstream, "up"), (self.upstream, self.client, "down")):
            threading.Thread(target=self._pump, args=(src, dst), name=f"proxy-{name}", daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self._done.is_set() and not self._proxy_closed.is_set():
                if not self._flowing.wait(_TICK):
                    continue  # stalled: leave the bytes in the kernel buffers
                readable, _, _ = select.select([src], [], [], _TICK)
                if not readable or not self._flowing.is_set():
                    continue
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            self.close()

    def close(self) -> None:
        with self._closing:
            if self._done.is_set():
                return
            self._done.set()
        _close(self.client)
        _close(self.upstream)
        self._forget(self)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked on this socket
    except OSError:
        pass
    sock.close()
