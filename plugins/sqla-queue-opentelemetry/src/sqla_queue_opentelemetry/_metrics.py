"""Lifecycle events as OpenTelemetry metrics, with the Prometheus plugin's names and units.

A host that moves from sqla-queue-prometheus to an OpenTelemetry pipeline keeps its dashboards:
counters are named as that plugin's (an OpenTelemetry Prometheus exporter adds the same
``_total``), histograms are in seconds with the same buckets (an advisory: a View may change
them), and the attributes are the same labels, ``queue`` and ``task``. Job ids, workers, errors
and payloads are never attributes (unbounded cardinality, and errors may hold data).

Queue health comes from the database when the reader collects (observable gauges over
``queue.stats()``, one query per queue table and collection), so it is right for jobs other
processes enqueued: ``sqla_queue_eligible_jobs`` (the backlog due now),
``sqla_queue_scheduled_jobs`` and ``sqla_queue_oldest_eligible_age_seconds``.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from sqla_queue.types import (
    EmptyClaim,
    JobCancelled,
    JobClaimed,
    JobCompleted,
    JobEnqueued,
    JobFailed,
    JobRecovered,
    JobRetried,
    JobSnoozed,
    LostClaim,
)

logger = logging.getLogger("sqla_queue_opentelemetry")

SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
"""The Prometheus plugin's buckets: jobs run from milliseconds to an hour."""

HEALTH_TTL = 1.0
"""Seconds one ``queue.stats()`` answers every gauge of a collection (they are read together)."""

JOBS = "{job}"


class Metrics:
    """The instruments, on a meter (the global provider's unless one is given)."""

    def __init__(self, meter: metrics.Meter) -> None:
        counter = meter.create_counter
        self.enqueued = counter("sqla_queue_jobs_enqueued", JOBS, "Jobs inserted by enqueue.")
        self.deduplicated = counter("sqla_queue_jobs_deduplicated", JOBS,
                                    "Enqueues collapsed onto an active job with the same key.")
        self.claimed = counter("sqla_queue_jobs_claimed", JOBS, "Jobs claimed by a worker.")
        self.completed = counter("sqla_queue_jobs_completed", JOBS, "Jobs completed.")
        self.retried = counter("sqla_queue_jobs_retried", JOBS, "Failed attempts scheduled for a retry.")
        self.failed = counter("sqla_queue_jobs_failed", JOBS, "Jobs that reached terminal failed.")
        self.cancelled = counter("sqla_queue_jobs_cancelled", JOBS,
                                 "Jobs that ended cancelled, by whether they were running then.")
        self.snoozed = counter("sqla_queue_jobs_snoozed", JOBS, "Handler runs that snoozed their job.")
        self.recovered = counter("sqla_queue_jobs_recovered", JOBS,
                                 "Jobs taken back from an expired lease, by the status they got.")
        self.lost_claims = counter("sqla_queue_lost_claims", "{claim}",
                                   "Outcomes or heartbeats that found the claim no longer theirs.")
        self.empty_claims = counter("sqla_queue_empty_claims", "{claim}", "Claims that returned no job.")
        self.queue_wait = _histogram(meter, "sqla_queue_job_queue_wait_seconds", "From run_at (due) to claim.")
        self.duration = _histogram(meter, "sqla_queue_job_duration_seconds",
                                   "From claim to completion, for completed jobs.")
        self.health = QueueHealth()
        meter.create_observable_gauge("sqla_queue_eligible_jobs", [self.health.observer("eligible")], JOBS,
                                      "Pending jobs that are due now with attempts left (the backlog).")
        meter.create_observable_gauge("sqla_queue_scheduled_jobs", [self.health.observer("scheduled")], JOBS,
                                      "Pending jobs due in the future.")
        meter.create_observable_gauge("sqla_queue_oldest_eligible_age_seconds",
                                      [self.health.observer("oldest_eligible_age")], "s",
                                      "How long the oldest due pending job has waited (0 when none is due).")

    def enqueued_event(self, event: JobEnqueued) -> None:
        (self.deduplicated if event.deduplicated else self.enqueued).add(1, _job(event))

    def claimed_event(self, event: JobClaimed) -> None:
        self.claimed.add(1, _job(event))
        _record(self.queue_wait, event, event.queue_wait)

    def completed_event(self, event: JobCompleted) -> None:
        self.completed.add(1, _job(event))
        _record(self.duration, event, event.duration)

    def retried_event(self, event: JobRetried) -> None:
        self.retried.add(1, _job(event))

    def failed_event(self, event: JobFailed) -> None:
        self.failed.add(1, _job(event))

    def cancelled_event(self, event: JobCancelled) -> None:
        self.cancelled.add(1, {**_job(event), "while_running": "true" if event.requested_while_running else "false"})

    def snoozed_event(self, event: JobSnoozed) -> None:
        self.snoozed.add(1, _job(event))

    def recovered_event(self, event: JobRecovered) -> None:
        self.recovered.add(1, {**_job(event), "status": event.status.value})

    def lost_claim_event(self, event: LostClaim) -> None:
        self.lost_claims.add(1, {"operation": event.operation})

    def empty_claim_event(self, event: EmptyClaim) -> None:
        self.empty_claims.add(1, {"queue": event.queue})


class QueueHealth:
    """The gauges' reading of every watched Queue: ``queue.stats()`` once per table and
    `HEALTH_TTL`, held weakly and keyed by database and table like the Prometheus plugin's."""

    def __init__(self) -> None:
        self._queues: weakref.WeakValueDictionary[tuple[str, str], Any] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()
        self._read_at = float("-inf")
        self._stats: list[Any] = []

    def watch(self, queue: Any) -> None:
        url = queue.engine.url.render_as_string(hide_password=True)
        self._queues[(url, queue.table.fullname)] = queue

    def observer(self, field: str) -> Any:
        def observe(options: CallbackOptions) -> Iterator[Observation]:
            for health in self.stats():
                value = _number(getattr(health, field, None))
                if value is not None or field == "oldest_eligible_age":
                    yield Observation(value or 0.0, {"queue": health.queue})
        return observe

    def stats(self) -> list[Any]:
        with self._lock:
            if time.monotonic() - self._read_at >= HEALTH_TTL:
                self._stats = list(_read_all(list(self._queues.values())))
                self._read_at = time.monotonic()
            return self._stats


def _read_all(queues: list[Any]) -> Iterable[Any]:
    for queue in queues:
        try:
            # Collection is synchronous; a Queue on an AsyncEngine reads through its sync engine.
            yield from queue.on_engine(queue.engine).stats()
        except Exception as exc:
            logger.warning("could not read queue health for %s: %s", queue.table.fullname, exc)


def _histogram(meter: metrics.Meter, name: str, description: str) -> metrics.Histogram:
    return meter.create_histogram(name, "s", description, explicit_bucket_boundaries_advisory=list(SECONDS_BUCKETS))


def _job(event: Any) -> dict[str, str]:
    return {"queue": event.queue, "task": event.task}


def _record(histogram: metrics.Histogram, event: Any, value: timedelta | None) -> None:
    """Durations the database could not compute (a row without locked_at) are skipped, not 0."""
    if value is not None:
        histogram.record(max(value.total_seconds(), 0.0), _job(event))


def _number(value: Any) -> float | None:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None
