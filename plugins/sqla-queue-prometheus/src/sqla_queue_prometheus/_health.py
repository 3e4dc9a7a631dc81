"""The seed's queue-health signals as gauges, read from the database at scrape time.

A gauge set from lifecycle events would drift (a job enqueued by another process, a row an
operator deleted); ``queue.stats()`` is the truth. One scrape runs it once per watched queue
table.

Every number `sqla_queue.QueueHealth` carries becomes a gauge: the ones named below with their
documented names, any field a later sqla_queue adds as ``sqla_queue_health_<field>`` (with
``_seconds`` for durations), so upgrading sqla_queue never silently drops a signal.

``sqla_queue_live_workers{queue}`` counts the live workers serving each queue, from the worker
registry (`Queue.workers`): each queue with jobs is listed, at 0 when nobody serves it, so an
alert on ``== 0`` fires for the queue that has work and no worker.
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

logger = logging.getLogger("sqla_queue_prometheus")

STATUS_FIELDS = ("pending", "running", "completed", "failed", "cancelled")
"""Counts by status, exported together as ``sqla_queue_jobs{status=...}``."""

NAMED_FIELDS = {
    "eligible": ("sqla_queue_eligible_jobs", "Pending jobs that are due now with attempts left."),
    "scheduled": ("sqla_queue_scheduled_jobs", "Pending jobs due in the future."),
    "oldest_eligible_age": (
        "sqla_queue_oldest_eligible_age_seconds",
        "How long the oldest due pending job has waited (0 when none is due).",
    ),
    "near_max_attempts": (
        "sqla_queue_near_max_attempts_jobs", "Active jobs with at most one attempt left."),
    "paused": ("sqla_queue_paused", "1 while the queue is paused (workers claim none of its jobs), else 0."),
}
LIVE_WORKERS = ("sqla_queue_live_workers", "Live workers serving the queue (the worker registry).")
ZERO_WHEN_MISSING = {"oldest_eligible_age"}
"""A missing age means "nothing waits": 0 keeps the series (and its alert) continuous."""


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
        """Nothing: registering the collector must not query the database (prometheus_client
        calls ``collect`` at registration when there is no ``describe``)."""
        return []

    def collect(self) -> Iterator[Metric]:
        families: dict[str, GaugeMetricFamily] = {}
        up = 1
        for queue in list(self._queues.values()):
            try:
                # A scrape is synchronous code; a queue built from an AsyncEngine refuses
                # synchronous calls, so read through its synchronous engine explicitly (for any
                # other queue that is the engine its own calls use).
                readable = queue.on_engine(queue.engine)
                stats = readable.stats()
                workers = readable.workers(include_dead=False)
            except Exception as exc:
                up = 0
                logger.warning("could not read queue health for %s: %s", queue.table.fullname, exc)
                continue
            for health in stats:
                _add(families, health)
            _add_live_workers(families, [h.queue for h in stats], workers)
        yield from families.values()
        yield GaugeMetricFamily("sqla_queue_health_up", "1 if every queue table answered the last scrape.", up)


def _add(families: dict[str, GaugeMetricFamily], health: Any) -> None:
    for field in dataclasses.fields(health):
        if field.name == "queue":
            continue
        value = getattr(health, field.name)
        if field.name in ZERO_WHEN_MISSING and value is None:
            value = timedelta(0)
        number = _number(value)
        if number is None:
            continue
        if field.name in STATUS_FIELDS:
            family = _family(families, "sqla_queue_jobs", "Jobs by status.", ["queue", "status"])
            family.add_metric([health.queue, field.name], number)
        else:
            name, documentation = _name(field.name, value)
            _family(families, name, documentation, ["queue"]).add_metric([health.queue], number)


def _add_live_workers(families: dict[str, GaugeMetricFamily], queues: list[str], workers: list[Any]) -> None:
    """One series per queue with jobs or a live worker: how many live workers serve it."""
    served: dict[str, int] = dict.fromkeys(queues, 0)
    for worker in workers:
        for name in worker.queues:
            served[name] = served.get(name, 0) + 1
    family = _family(families, *LIVE_WORKERS, ["queue"])
    for name, count in sorted(served.items()):
        family.add_metric([name], count)


def _number(value: Any) -> float | None:
    """Durations in seconds, counts as they are, a flag as 1 or 0."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _name(field: str, value: Any) -> tuple[str, str]:
    if field in NAMED_FIELDS:
        return NAMED_FIELDS[field]
    suffix = "_seconds" if isinstance(value, timedelta) else ""
    return f"sqla_queue_health_{field}{suffix}", f"sqla_queue.QueueHealth.{field}."


def _family(families: dict[str, GaugeMetricFamily], name: str, documentation: str, labels: list[str]) -> GaugeMetricFamily:
    if name not in families:
        families[name] = GaugeMetricFamily(name, documentation, labels=labels)
    return families[name]
