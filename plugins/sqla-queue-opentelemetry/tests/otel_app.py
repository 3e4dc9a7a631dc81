"""The application of the two-process tests: the test process imports it to enqueue (its SDK is
the test's in-memory one), and ``sqla-queue --app otel_app:queue worker`` imports it to run the
jobs, with ``OTEL_APP_SPANS_FILE`` set: the worker's SDK then writes every finished span to
that file as one JSON line, for the test to read."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from datetime import timedelta

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import sqla_queue as sq

QUEUE = "otel-two-processes"

queue = sq.Queue(os.environ["OTEL_APP_DATABASE_URL"], plugins=["opentelemetry"])
tracer = trace.get_tracer("otel_app")
logger = logging.getLogger("otel_app")


@queue.task(queue=QUEUE)
def ship(payload: dict, ctx: sq.JobContext) -> None:
    logger.info("shipping order %s", payload["order"])
    with tracer.start_as_current_span("charge card"):
        pass


@queue.task(queue=QUEUE, max_attempts=3, retry_delay=timedelta(0))
def flaky(payload: dict, ctx: sq.JobContext) -> None:
    if ctx.attempt < 3:
        raise ConnectionError("upstream unavailable")


class JsonLinesExporter(SpanExporter):
    """Each finished span as a JSON line: ids in hex, as a collector would show them."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a", encoding="utf-8") as out:
            for span in spans:
                out.write(json.dumps(_as_dict(span)) + "\n")
        return SpanExportResult.SUCCESS


def _as_dict(span: ReadableSpan) -> dict:
    return {
        "name": span.name, "kind": span.kind.name,
        "trace_id": f"{span.context.trace_id:032x}", "span_id": f"{span.context.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "links": [{"trace_id": f"{link.context.trace_id:032x}", "span_id": f"{link.context.span_id:016x}",
                   "kind": link.attributes.get("sqla_queue.link")} for link in span.links],
        "attributes": dict(span.attributes or {}), "status": span.status.status_code.name,
    }


if os.environ.get("OTEL_APP_SPANS_FILE"):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(os.environ["OTEL_APP_SPANS_FILE"])))
    trace.set_tracer_provider(provider)
