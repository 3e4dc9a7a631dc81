"""Log correlation: log records made while a span is current carry its ids, and sqla_queue's
per-job records (``job 42 completed``, logged after the handler returned) carry the ids of that
job's last ``process`` span in this process.

The ids go on the record as ``otelTraceID`` / ``otelSpanID`` (hex), OpenTelemetry's logging
convention: ``sqla_queue.logformat.JsonFormatter`` writes them as ``trace_id`` / ``span_id``, and
a text format can show ``%(otelTraceID)s``. Installed once per process, by the first Queue that
registers the plugin; the record factory it wraps keeps working.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import format_span_id, format_trace_id

from ._tracing import JobIndex

TRACE_ID = "otelTraceID"
SPAN_ID = "otelSpanID"

_installed = False
_install_lock = threading.Lock()


class _JobRecordFilter(logging.Filter):
    """On the ``sqla_queue`` logger: a per-job record (``job_id`` in its extra) made outside any
    span gets the ids of the job's last ``process`` span."""

    def __init__(self, processes: JobIndex) -> None:
        super().__init__()
        self.processes = processes

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, TRACE_ID, "0") == "0":
            context = self.processes.get(getattr(record, "job_id", None))
            if context is not None:
                setattr(record, TRACE_ID, format_trace_id(context.trace_id))
                setattr(record, SPAN_ID, format_span_id(context.span_id))
        return True


def install(processes: JobIndex) -> None:
    """Wrap the process's log record factory and filter sqla_queue's records, once."""
    global _installed
    with _install_lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            context = trace.get_current_span().get_span_context()
            if context.is_valid:
                setattr(record, TRACE_ID, format_trace_id(context.trace_id))
                setattr(record, SPAN_ID, format_span_id(context.span_id))
            return record

        logging.setLogRecordFactory(factory)
        logging.getLogger("sqla_queue").addFilter(_JobRecordFilter(processes))
        _installed = True
