"""Exposing the metrics: an HTTP endpoint of our own, or a WSGI app the host mounts."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app, start_http_server

PORT_ENV = "SQLA_QUEUE_PROMETHEUS_PORT"
ADDR_ENV = "SQLA_QUEUE_PROMETHEUS_ADDR"
DEFAULT_ADDR = "0.0.0.0"
"""prometheus_client's own default: a scraper usually runs on another host."""

logger = logging.getLogger("sqla_queue_prometheus")

# One endpoint per address and port in a process, however many Queues are built: the
# process owns the port, not a Queue. Guarded because Queues may be built on any thread.
_servers: dict[tuple[str, int], Any] = {}
_servers_lock = threading.Lock()


def serve(port: int, addr: str = DEFAULT_ADDR, registry: CollectorRegistry = REGISTRY) -> Any:
    """Serve ``/metrics`` on a daemon thread; returns the server (``server.server_port`` is the
    port, useful with port 0). Serving the same address and port twice returns the first."""
    with _servers_lock:
        server = _servers.get((addr, port))
        if server is None:
            server, _thread = start_http_server(port, addr=addr, registry=registry)
            _servers[(addr, port)] = server
            logger.info("serving sqla_queue metrics on %s:%s", addr, server.server_port)
        return server


def wsgi_app(registry: CollectorRegistry = REGISTRY) -> Any:
    """A WSGI app that answers with the metrics: mount it in the host's web server."""
    return make_wsgi_app(registry)


def serve_from_env(registry: CollectorRegistry) -> None:
    """Start the endpoint if ``SQLA_QUEUE_PROMETHEUS_PORT`` is set (e.g. only for workers)."""
    port = os.environ.get(PORT_ENV)
    if not port:
        return
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"{PORT_ENV} must be a port number, got {port!r}") from None
    serve(number, os.environ.get(ADDR_ENV) or DEFAULT_ADDR, registry)
