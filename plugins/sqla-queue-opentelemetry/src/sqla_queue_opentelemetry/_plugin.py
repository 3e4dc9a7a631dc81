"""The plugin object: sqla_queue's hooks, each handed to the part that owns it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from opentelemetry import metrics, trace

import sqla_queue
from sqla_queue.types import (
    BatchCommitted,
    ClaimedJob,
    EmptyClaim,
    JobCancelled,
    JobClaimed,
    JobCompleted,
    JobContext,
    JobEnqueued,
    JobFailed,
    JobRecovered,
    JobRetried,
    JobSnoozed,
    LostClaim,
)

from . import _logs
from ._metrics import Metrics
from ._tracing import Tracing

SCOPE = "sqla_queue_opentelemetry"
"""The instrumentation scope of every span and instrument."""


def _version() -> str | None:
    try:
        return version("sqla-queue-opentelemetry")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        return None


class OpenTelemetry:
    """Traces, metrics and log correlation for the Queues that enable it.

    :param tracer_provider: where spans go (default: the global provider, looked up when a span
        starts, so configuring the SDK after import works).
    :param meter_provider: where metrics go (default: the global provider, likewise).
    :param record_exception_messages: record a failed attempt's exception message and stack on
        its span (``span.record_exception``). Off by default: a message may quote the payload or
        a secret; the span still gets status ERROR and the exception's type.
    """

    def __init__(self, *, tracer_provider: trace.TracerProvider | None = None,
                 meter_provider: metrics.MeterProvider | None = None,
                 record_exception_messages: bool = False) -> None:
        self.tracing = Tracing(trace.get_tracer(SCOPE, _version(), tracer_provider), record_exception_messages)
        self.metrics = Metrics(metrics.get_meter(SCOPE, _version(), meter_provider))

    @sqla_queue.hookimpl
    def sqla_queue_configure(self, queue: Any) -> None:
        self.metrics.health.watch(queue)
        _logs.install(self.tracing.processes)

    # -- traces -----------------------------------------------------------------------------

    @sqla_queue.hookimpl
    def sqla_queue_job_meta(self, task: str, options: Mapping[str, Any]) -> dict[str, str]:
        return self.tracing.start_send(task, options)

    @sqla_queue.hookimpl
    def sqla_queue_handle_job(self, job: ClaimedJob, ctx: JobContext, call_next: Callable[[], Any]) -> Any:
        return self.tracing.around(job, ctx, call_next)

    @sqla_queue.hookimpl
    def sqla_queue_batch_committed(self, event: BatchCommitted) -> None:
        self.tracing.batch(event)

    # -- events: the send span's end, and the metrics ---------------------------------------

    @sqla_queue.hookimpl
    def sqla_queue_job_enqueued(self, event: JobEnqueued) -> None:
        self.tracing.end_send(event)
        self.metrics.enqueued_event(event)

    @sqla_queue.hookimpl
    def sqla_queue_job_claimed(self, event: JobClaimed) -> None:
        self.metrics.claimed_event(event)

    @sqla_queue.hookimpl
    def sqla_queue_job_completed(self, event: JobCompleted) -> None:
        self.metrics.completed_event(event)

    @sqla_queue.hookimpl
    def sqla_queue_job_retried(self, event: JobRetried) -> None:
        self.metrics.retried_event(event)

    @sqla_queue.hookimpl
    def sqla_queue_job_failed(self, event: JobFailed) -> None:
        self.metrics.failed_event(event)

    @sqla_queue.hookimpl
    def sqla_queue_job_cancelled(self, event: JobCancelled) -> None:
        self.metrics.cancelled_event(event)

    @sqla_queue.hookimpl
    def sqla_queue_job_snoozed(self, event: JobSnoozed) -> None:
        self.metrics.snoozed_event(event)

    @sqla_queue.hookimpl
    def sqla_queue_job_recovered(self, event: JobRecovered) -> None:
        self.metrics.recovered_event(event)

    @sqla_queue.hookimpl
    def sqla_queue_lost_claim(self, event: LostClaim) -> None:
        self.metrics.lost_claim_event(event)

    @sqla_queue.hookimpl
    def sqla_queue_empty_claim(self, event: EmptyClaim) -> None:
        self.metrics.empty_claim_event(event)
