"""Lifecycle events as Prometheus counters and histograms.

Labels are the queue and the task: both are bounded by the application's own code, so the
series count stays small. Job ids, workers, errors and payloads are never labels (unbounded
cardinality, and errors may hold data).
"""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

import sqla_queue
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

from ._health import QueueHealthCollector
from ._serve import serve_from_env

SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
"""Jobs run from milliseconds to an hour; prometheus_client's default buckets stop at 10 s."""

_JOB = ("queue", "task")


class PrometheusMetrics:
    """The plugin: one set of metrics in one registry.

    :param registry: where the metrics live (default: prometheus_client's global registry).
        Build a second instance only with a registry of its own; the same names cannot be
        registered twice in one registry.
    """

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self.health = QueueHealthCollector()
        registry.register(self.health)
        self.enqueued = _counter("sqla_queue_jobs_enqueued", "Jobs inserted by enqueue.", _JOB, registry)
        self.deduplicated = _counter(
            "sqla_queue_jobs_deduplicated", "Enqueues collapsed onto an active job with the same key.",
            _JOB, registry)
        self.claimed = _counter("sqla_queue_jobs_claimed", "Jobs claimed by a worker.", _JOB, registry)
        self.completed = _counter("sqla_queue_jobs_completed", "Jobs completed.", _JOB, registry)
        self.retried = _counter("sqla_queue_jobs_retried", "Failed attempts scheduled for a retry.", _JOB, registry)
        self.failed = _counter("sqla_queue_jobs_failed", "Jobs that reached terminal failed.", _JOB, registry)
        self.cancelled = _counter(
            "sqla_queue_jobs_cancelled", "Jobs that ended cancelled, by whether they were running then.",
            (*_JOB, "while_running"), registry)
        self.snoozed = _counter(
            "sqla_queue_jobs_snoozed", "Handler runs that snoozed their job (no attempt spent).", _JOB, registry)
        self.recovered = _counter(
            "sqla_queue_jobs_recovered", "Jobs taken back from an expired lease, by the status they got.",
            (*_JOB, "status"), registry)
        self.lost_claims = _counter(
            "sqla_queue_lost_claims", "Outcomes or heartbeats that found the claim no longer theirs.",
            ("operation",), registry)
        self.empty_claims = _counter(
            "sqla_queue_empty_claims", "Claims that returned no job.", ("queue",), registry)
        self.queue_wait = _histogram(
            "sqla_queue_job_queue_wait_seconds", "From run_at (due) to claim.", registry)
        self.duration = _histogram(
            "sqla_queue_job_duration_seconds", "From claim to completion, for completed jobs.", registry)

    @sqla_queue.hookimpl
    def sqla_queue_configure(self, queue: sqla_queue.Queue) -> None:
        self.health.watch(queue)
        serve_from_env(self.registry)

    @sqla_queue.hookimpl
    def sqla_queue_job_enqueued(self, event: JobEnqueued) -> None:
        metric = self.deduplicated if event.deduplicated else self.enqueued
        metric.labels(event.queue, event.task).inc()

    @sqla_queue.hookimpl
    def sqla_queue_job_claimed(self, event: JobClaimed) -> None:
        self.claimed.labels(event.queue, event.task).inc()
        _observe(self.queue_wait, event.queue, event.task, event.queue_wait)

    @sqla_queue.hookimpl
    def sqla_queue_job_completed(self, event: JobCompleted) -> None:
        self.completed.labels(event.queue, event.task).inc()
        _observe(self.duration, event.queue, event.task, event.duration)

    @sqla_queue.hookimpl
    def sqla_queue_job_retried(self, event: JobRetried) -> None:
        self.retried.labels(event.queue, event.task).inc()

    @sqla_queue.hookimpl
    def sqla_queue_job_failed(self, event: JobFailed) -> None:
        self.failed.labels(event.queue, event.task).inc()

    @sqla_queue.hookimpl
    def sqla_queue_job_cancelled(self, event: JobCancelled) -> None:
        self.cancelled.labels(event.queue, event.task, "true" if event.requested_while_running else "false").inc()

    @sqla_queue.hookimpl
    def sqla_queue_job_snoozed(self, event: JobSnoozed) -> None:
        self.snoozed.labels(event.queue, event.task).inc()

    @sqla_queue.hookimpl
    def sqla_queue_job_recovered(self, event: JobRecovered) -> None:
        self.recovered.labels(event.queue, event.task, event.status.value).inc()

    @sqla_queue.hookimpl
    def sqla_queue_lost_claim(self, event: LostClaim) -> None:
        self.lost_claims.labels(event.operation).inc()

    @sqla_queue.hookimpl
    def sqla_queue_empty_claim(self, event: EmptyClaim) -> None:
        self.empty_claims.labels(event.queue).inc()


def _counter(name: str, documentation: str, labels: tuple[str, ...], registry: CollectorRegistry) -> Counter:
    return Counter(name, documentation, labels, registry=registry)


def _histogram(name: str, documentation: str, registry: CollectorRegistry) -> Histogram:
    return Histogram(name, documentation, _JOB, registry=registry, buckets=SECONDS_BUCKETS)


def _observe(histogram: Histogram, queue: str, task: str, value: timedelta | None) -> None:
    """Durations the database could not compute (a row without locked_at) are skipped, not 0."""
    if value is not None:
        histogram.labels(queue, task).observe(max(value.total_seconds(), 0.0))
