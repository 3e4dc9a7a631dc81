"""Spans: a producer ``send`` span per enqueue, a consumer ``process`` span per attempt.

The ``send`` span starts when sqla_queue asks for the job's meta (before the INSERT), so the
context written into the job is its own, and ends when the enqueue is announced
(`sqla_queue_job_enqueued`, which carries that meta back): it covers the INSERT and knows the
job's id. An enqueue that raised after its meta was asked never announces; its span is ended,
marked as an error, once `MAX_PENDING_SENDS` newer ones wait (memory stays bounded).

The ``process`` span of the first attempt is a child of the ``send`` span: the request that
enqueued the job, the job and everything its handler does are one trace. A retry starts a trace
of its own, *linked* to the ``send`` span, so a retry storm never grows one giant trace.

Claim rounds and completion flushes (`sqla_queue_batch_committed`) are spans of their own,
``claim`` and ``complete``, recorded after the fact with their real start and duration: each
``process`` span links to the ``claim`` span that claimed its job, each ``complete`` span to the
``process`` spans whose completions it committed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode

import sqla_queue
from sqla_queue.types import BatchCommitted, ClaimedJob, JobContext, JobEnqueued

from . import _attributes as attr
from ._propagation import extract, inject, origin_of

MAX_PENDING_SENDS = 10_000
"""``send`` spans waiting for their enqueue to be announced, at most: older ones are ended."""

REMEMBERED_JOBS = 4096
"""Jobs whose ``claim`` and ``process`` span contexts are kept (for links and log records)."""

MAX_BATCH_LINKS = 128
"""Links a ``complete`` span carries at most (the SDK's default span limit)."""


class JobIndex:
    """Job id -> a span context, the most recent `REMEMBERED_JOBS` jobs; thread-safe."""

    def __init__(self) -> None:
        self._contexts: OrderedDict[int, SpanContext] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, job_id: int, context: SpanContext) -> None:
        if not context.is_valid:
            return
        with self._lock:
            self._contexts[job_id] = context
            self._contexts.move_to_end(job_id)
            while len(self._contexts) > REMEMBERED_JOBS:
                self._contexts.popitem(last=False)

    def get(self, job_id: Any) -> SpanContext | None:
        with self._lock:
            return self._contexts.get(job_id)


class Tracing:
    """The spans, from a tracer (the global provider's unless one is given)."""

    def __init__(self, tracer: trace.Tracer, record_exception_messages: bool = False) -> None:
        self.tracer = tracer
        self.record_exception_messages = record_exception_messages
        self._sending: OrderedDict[int, Span] = OrderedDict()
        self._lock = threading.Lock()
        self.claims = JobIndex()
        self.processes = JobIndex()

    # -- enqueue ----------------------------------------------------------------------------

    def start_send(self, task: str, options: Mapping[str, Any]) -> dict[str, str]:
        """Start the job's ``send`` span and return the carrier to store in its meta."""
        queue = str(options.get("queue"))
        span = self.tracer.start_span(
            f"send {queue}", kind=SpanKind.PRODUCER,
            attributes={attr.MESSAGING_SYSTEM: attr.SYSTEM, attr.DESTINATION: queue, attr.OPERATION_TYPE: "send",
                        attr.OPERATION_NAME: "send", attr.TASK: task},
        )
        with self._lock:
            self._sending[span.get_span_context().span_id] = span
            while len(self._sending) > MAX_PENDING_SENDS:
                _, stale = self._sending.popitem(last=False)
                stale.set_status(Status(StatusCode.ERROR, "the enqueue was never announced"))
                stale.end()
        return inject(span)

    def end_send(self, event: JobEnqueued) -> None:
        """End the ``send`` span whose context the announced job carries (if it is ours)."""
        origin = origin_of(event.meta)
        if origin is None:
            return
        with self._lock:
            span = self._sending.pop(origin.span_id, None)
        if span is None:
            return
        span.set_attribute(attr.MESSAGE_ID, str(event.job_id))
        span.set_attribute(attr.DEDUPLICATED, event.deduplicated)
        span.end()

    # -- process ----------------------------------------------------------------------------

    def around(self, job: ClaimedJob, ctx: JobContext, call_next: Callable[[], Any]) -> Any:
        """The run middleware: the handler runs inside the attempt's ``process`` span."""
        if ctx.is_async:
            async def traced() -> Any:
                with self.process_span(job, ctx) as span:
                    return _outcome(span, await call_next())
            return traced()
        with self.process_span(job, ctx) as span:
            return _outcome(span, call_next())

    @contextmanager
    def process_span(self, job: ClaimedJob, ctx: JobContext) -> Iterator[Span]:
        """The ``process`` span, current (with the enqueuer's baggage) while the body runs."""
        parent, links = _parent_and_links(ctx)
        claim = self.claims.get(job.id)
        if claim is not None:
            links.append(Link(claim, {attr.LINK_KIND: "claim"}))
        span = self.tracer.start_span(
            f"process {job.queue}", context=parent, kind=SpanKind.CONSUMER, links=links,
            attributes={attr.MESSAGING_SYSTEM: attr.SYSTEM, attr.DESTINATION: job.queue,
                        attr.OPERATION_TYPE: "process", attr.OPERATION_NAME: "process",
                        attr.MESSAGE_ID: str(job.id), attr.TASK: job.task, attr.ATTEMPT: ctx.attempt,
                        attr.MAX_ATTEMPTS: ctx.max_attempts},
        )
        self.processes.put(job.id, span.get_span_context())
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        try:
            yield span
        except sqla_queue.Snooze:
            span.set_attribute(attr.OUTCOME, "snoozed")
            raise
        except BaseException as exc:  # the attempt's failure, whatever the handler raised
            self._record_error(span, exc)
            raise
        finally:
            otel_context.detach(token)
            span.end()

    # -- batches ----------------------------------------------------------------------------

    def batch(self, event: BatchCommitted) -> None:
        """The batch as a span with its real start and end, under the current context (none in
        a worker's claim loop: a trace of its own)."""
        started = int(event.started_at.timestamp() * 1e9)
        links = [Link(context, {attr.LINK_KIND: "process"}) for context in
                 (self.processes.get(job_id) for job_id in event.completed[:MAX_BATCH_LINKS]) if context]
        attributes: dict[str, Any] = {
            attr.MESSAGING_SYSTEM: attr.SYSTEM, attr.OPERATION_NAME: event.operation,
            attr.OPERATION_TYPE: "receive" if event.operation == "claim" else "settle",
            attr.BATCH_COUNT: len(event.claimed) + len(event.completed),
            attr.CLAIMED: len(event.claimed), attr.COMPLETED: len(event.completed),
        }
        if len(event.queues) == 1:
            attributes[attr.DESTINATION] = event.queues[0]
        if event.worker_id is not None:
            attributes[attr.WORKER_ID] = event.worker_id
        name = f"{event.operation} {event.queues[0]}" if len(event.queues) == 1 else event.operation
        span = self.tracer.start_span(name, kind=SpanKind.CLIENT, links=links, attributes=attributes,
                                      start_time=started)
        span.end(end_time=started + int(event.duration.total_seconds() * 1e9))
        for job_id in event.claimed:
            self.claims.put(job_id, span.get_span_context())

    def _record_error(self, span: Span, exc: BaseException) -> None:
        """Status ERROR with the exception's type; its message (which may quote the payload or
        a secret) only when the plugin was built with ``record_exception_messages=True``."""
        kind = _qualified_name(type(exc))
        span.set_attribute(attr.OUTCOME, "error")
        span.set_attribute(attr.ERROR_TYPE, kind)
        span.set_status(Status(StatusCode.ERROR, kind))
        if self.record_exception_messages:
            span.record_exception(exc, escaped=True)
        else:
            span.add_event("exception", {"exception.type": kind, "exception.escaped": True})


def _parent_and_links(ctx: JobContext) -> tuple[otel_context.Context, list[Link]]:
    """First attempt: the enqueuer's context is the parent. Later ones: a new trace (the
    enqueuer's baggage kept) with a link to the ``send`` span."""
    if not ctx.meta:  # enqueued without the plugin: nothing to extract (the common cost, skipped)
        return otel_context.Context(), []
    extracted, origin = extract(ctx.meta)
    if ctx.attempt <= 1 or not origin.is_valid:
        return extracted, []
    fresh = trace.set_span_in_context(trace.INVALID_SPAN, extracted)
    return fresh, [Link(origin, {attr.LINK_KIND: "enqueue", attr.ATTEMPT: ctx.attempt})]


def _outcome(span: Span, value: Any) -> Any:
    span.set_attribute(attr.OUTCOME, "snoozed" if isinstance(value, sqla_queue.Snooze) else "success")
    return value


def _qualified_name(kind: type) -> str:
    module = kind.__module__
    return kind.__qualname__ if module in ("builtins", "__main__") else f"{module}.{kind.__qualname__}"
