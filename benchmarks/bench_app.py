"""The sqla_queue application the benchmark drives: one task named ``noop`` on queue ``bench``.

Its handler is the no-op function, unless `handler` names another (the asyncio section's
``async def`` no-op and ``await asyncio.sleep(0.1)``): the pre-filled jobs carry the task name
``noop``, so each variant is registered under that name.

Entry-point plugins are not loaded (``load_entrypoints=False``): the figures are the library's
own, not those of whatever plugins the environment happens to have installed. The built-in
plugins (default strategies, logging) stay, as in any application.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import sqla_queue as sq

from .raw_sql import QUEUE, TASK


class CompletionCounter:
    """Counts completions through the library's own lifecycle hook, into a shared integer the
    parent process samples (the sustained drain's windows)."""

    def __init__(self, shared) -> None:
        self.shared = shared
        self._lock = threading.Lock()

    @sq.hookimpl
    def sqla_queue_job_completed(self, event) -> None:
        with self._lock:
            self.shared.value += 1


class HandlerStarts:
    """Records ``(payload t0, handler start)`` on ``time.monotonic()``, which on Linux is one
    clock for every process (CLOCK_MONOTONIC), so the enqueuing parent's t0 compares directly."""

    def __init__(self) -> None:
        self.starts: list[tuple[float, float]] = []

    def record(self, payload: dict) -> None:
        """A payload without ``t0`` (a pre-filled job) records the start alone (t0 None)."""
        self.starts.append((payload.get("t0"), time.monotonic()))


HANDLERS = ("sync", "async", "async_sleep")
SLEEP_SECONDS = 0.1  # what each "async_sleep" job awaits


def make_queue(url, *, counter=None, starts: HandlerStarts | None = None, handler: str = "sync",
               otel: bool = False) -> sq.Queue:
    """`url` is anything ``sq.Queue`` accepts (a URL, an Engine, an AsyncEngine). `otel`: the
    ``opentelemetry`` plugin enabled by name, with `set_up_dropping_sdk` (benchmarks/otel.py)."""
    logging.getLogger("sqla_queue").setLevel(logging.WARNING)
    plugins: list = [CompletionCounter(counter)] if counter is not None else []
    if otel:
        set_up_dropping_sdk()
        plugins.append("opentelemetry")
    queue = sq.Queue(url, load_entrypoints=False, plugins=plugins)

    if handler == "async":
        @queue.task(name=TASK, queue=QUEUE)
        async def noop(payload: dict, ctx: sq.JobContext) -> None:
            pass
    elif handler == "async_sleep":
        @queue.task(name=TASK, queue=QUEUE)
        async def sleepy(payload: dict, ctx: sq.JobContext) -> None:
            await asyncio.sleep(SLEEP_SECONDS)
    elif handler != "sync":
        raise ValueError(f"unknown handler {handler!r}; choose from {', '.join(HANDLERS)}")
    elif starts is None:
        @queue.task(name=TASK, queue=QUEUE)
        def noop(payload: dict, ctx: sq.JobContext) -> None:
            return None
    else:
        @queue.task(name=TASK, queue=QUEUE)
        def timed(payload: dict, ctx: sq.JobContext) -> None:
            starts.record(payload)

    return queue


def set_up_dropping_sdk() -> None:
    """The OpenTelemetry SDK as production runs it (a batch span processor, aggregated metrics),
    exporting nowhere: what the plugin costs the worker, not what an exporter's network does."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropping(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropping()))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
