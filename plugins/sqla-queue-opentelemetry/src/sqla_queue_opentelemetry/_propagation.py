"""The job's ``meta`` as a propagation carrier: W3C ``traceparent``, ``tracestate`` and
``baggage`` keys (or whatever the process's configured propagators write) at the top level of
``meta``, so any reader of the job, and any W3C-aware tool, finds them under their usual names.

The configured global propagator is used both ways, so a host that chose B3 or Jaeger headers
gets those keys instead, and a caller's own ``enqueue(meta={"traceparent": ...})`` wins over the
plugin's (the caller's ``meta=`` always does), carrying a context from elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanContext


def inject(span: Span) -> dict[str, str]:
    """The carrier for a job enqueued under `span`: its context and the current baggage."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return carrier


def extract(meta: Mapping[str, Any]) -> tuple[Context, SpanContext]:
    """The context a job was enqueued in (baggage included) and the enqueuing span's context
    (invalid when the job carries none)."""
    carrier = {key: value for key, value in meta.items() if isinstance(value, str)}
    context = propagate.extract(carrier)
    return context, trace.get_current_span(context).get_span_context()


def origin_of(meta: Mapping[str, Any] | None) -> SpanContext | None:
    """The enqueuing span's context stored in `meta`, or None."""
    if not meta:
        return None
    origin = extract(meta)[1]
    return origin if origin.is_valid else None
