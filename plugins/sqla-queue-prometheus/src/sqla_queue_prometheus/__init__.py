"""Prometheus metrics for sqla_queue, registered through the ``sqla_queue`` entry point.

Installing the distribution is enough: every Queue built with entry points on (the default)
registers `plugin` under the name ``prometheus``. It counts lifecycle events, records queue
waits and run durations, and exposes each configured queue's health signals as gauges read
at scrape time. Serve them with `serve`, mount `wsgi_app` in the host's web server, or set
``SQLA_QUEUE_PROMETHEUS_PORT`` (and optionally ``SQLA_QUEUE_PROMETHEUS_ADDR``) so the first
Queue built in the process starts the endpoint itself.
"""

from ._health import QueueHealthCollector
from ._metrics import PrometheusMetrics
from ._serve import ADDR_ENV, PORT_ENV, serve, wsgi_app

plugin = PrometheusMetrics()
"""The instance the entry point registers: its metrics live in prometheus_client's default
registry, so one process exposes one set however many Queues it builds."""

__all__ = [
    "ADDR_ENV",
    "PORT_ENV",
    "PrometheusMetrics",
    "QueueHealthCollector",
    "plugin",
    "serve",
    "wsgi_app",
]
