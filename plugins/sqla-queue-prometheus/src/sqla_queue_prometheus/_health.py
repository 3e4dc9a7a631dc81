"""The seed's queue-health signals as gauges, read from the database at scrape time.

A gauge set from lifecycle events would drift (a job enqueued by another process, a row an
operator deleted); ``queue.stats()`` is one aggregate query and is the truth. One scrape runs
it once per watched queue table.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

logger = logging.getLogger("sqla_queue_prometheus")

_STATUSES = ("pending", "running", "completed", "failed")


class QueueHealthCollector:
    """A prometheus_client collector over every Queue the plugin was configured with.

    Queues are held weakly and keyed by database and table, so a test suite that builds many
    Queues over one table reports it once, and a dropped Queue stops being scraped.
    """

    def __init__(self) -> None:
        self._queues: weakref.WeakValueDictionary[tuple[str, str], Any] = weakref.WeakValueDictionary()

    def watch(self, queue: Any) -> None:
        url = queue.engine.url.render_as_string(hide_password=True)
        self._queues[(url, queue.table.fullname)] = queue

    def describe(self) -> Iterable[Metric]:
        """Names only: registering the collector must not query the database."""
        return list(_families().values())

    def collect(self) -> Iterator[Metric]:
        families = _families()
        up = 1
        for queue in list(self._queues.values()):
            try:
                stats = queue.stats()
            except Exception as exc:
                up = 0
                logger.warning("could not read queue health for %s: %s", queue.table.fullname, exc)
                continue
            for health in stats:
                _add(families, health)
        yield from families.values()
        yield GaugeMetricFamily("sqla_queue_health_up", "1 if every queue table answered the last scrape.", up)


def _families() -> dict[str, GaugeMetricFamily]:
    return {
        "jobs": GaugeMetricFamily("sqla_queue_jobs", "Jobs by status.", labels=["queue", "status"]),
        "eligible": GaugeMetricFamily(
            "sqla_queue_eligible_jobs", "Pending jobs that are due now.", labels=["queue"]),
        "scheduled": GaugeMetricFamily(
            "sqla_queue_scheduled_jobs", "Pending jobs due in the future.", labels=["queue"]),
        "oldest": GaugeMetricFamily(
            "sqla_queue_oldest_eligible_age_seconds",
            "How long the oldest due pending job has waited (0 when none).", labels=["queue"]),
        "near_max": GaugeMetricFamily(
            "sqla_queue_near_max_attempts_jobs",
            "Active jobs on or one before their last attempt.", labels=["queue"]),
    }


def _add(families: dict[str, GaugeMetricFamily], health: Any) -> None:
    for status in _STATUSES:
        families["jobs"].add_metric([health.queue, status], getattr(health, status))
    families["eligible"].add_metric([health.queue], health.eligible)
    families["scheduled"].add_metric([health.queue], health.scheduled)
    age = health.oldest_eligible_age
    families["oldest"].add_metric([health.queue], age.total_seconds() if age is not None else 0.0)
    families["near_max"].add_metric([health.queue], health.near_max_attempts)
