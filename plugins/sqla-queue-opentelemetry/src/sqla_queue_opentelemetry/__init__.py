"""OpenTelemetry for sqla_queue, registered through the ``sqla_queue`` entry point as
``opentelemetry``.

It writes job meta and wraps every handler call, so a Queue uses it only when enabled by name:
``Queue(engine, plugins=["opentelemetry"])``, ``SQLA_QUEUE_PLUGINS=opentelemetry`` or
``sqla-queue --plugin opentelemetry``. Enabled in the enqueuing process and the worker, it gives:

* the enqueuing context (W3C ``traceparent``, ``tracestate``, ``baggage``) in each job's meta;
* a producer ``send`` span per enqueue, a consumer ``process`` span per attempt (the first a
  child of ``send``, retries linked to it), the handler running inside it;
* the Prometheus plugin's counters and histograms through the OpenTelemetry metrics API, and
  observable gauges for the backlog and the oldest eligible job's age;
* ``trace_id`` / ``span_id`` on the worker's JSON log lines while a job runs.

Spans and metrics go to the global providers (configure the SDK as usual), or to the ones given
to `OpenTelemetry`.
"""

from ._plugin import SCOPE, OpenTelemetry

plugin = OpenTelemetry()
"""The instance the entry point registers: global tracer and meter providers."""

__all__ = ["SCOPE", "OpenTelemetry", "plugin"]
