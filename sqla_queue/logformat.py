"""Log formatting for workers: one JSON object per line, and the CLI's logging configuration.

`JsonFormatter` is public so a host can name it in its own ``logging.config.dictConfig``::

    "formatters": {"json": {"()": "sqla_queue.logformat.JsonFormatter"}}

Each line holds ``time`` (UTC, ISO 8601), ``level``, ``logger`` and ``message``, then whichever
of `JOB_FIELDS` the record carries (sqla_queue's per-job records carry them as ``extra``), the
`TRACE_FIELDS` a tracing plugin set on it (sqla-queue-opentelemetry does while a job runs), and
``traceback`` for a failed attempt (the bounded, sanitized text stored on the job) or for a
record logged with ``exc_info``.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from typing import Any

JOB_FIELDS = ("job_id", "task", "queue", "attempt", "outcome", "duration", "error", "reason")
"""Record attributes copied into the JSON object when present: sqla_queue's per-job ``extra``."""

TRACE_FIELDS = {"trace_id": ("trace_id", "otelTraceID"), "span_id": ("span_id", "otelSpanID")}
"""JSON keys for the trace a record belongs to, each from the first of its record attributes
present (hex strings): the ``otel*`` names are OpenTelemetry's logging convention, which
sqla-queue-opentelemetry and opentelemetry-instrumentation-logging set; "0" means no span."""

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (line breaks inside values are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        entry.update({name: getattr(record, name) for name in JOB_FIELDS if getattr(record, name, None) is not None})
        entry.update(_trace_fields(record))
        trace = getattr(record, "traceback", None)
        if trace:
            # sqla_queue's failure records end their message with the traceback for text
            # handlers; here it has a key of its own, so the message keeps the summary only.
            entry["message"] = message.removesuffix(f"\n{trace}")
            entry["traceback"] = trace
        elif record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def _trace_fields(record: logging.LogRecord) -> dict[str, str]:
    found = {}
    for key, names in TRACE_FIELDS.items():
        value = next((v for v in (getattr(record, name, None) for name in names) if v not in (None, "0")), None)
        if value is not None:
            found[key] = str(value)
    return found


def logging_config(level: str = "INFO", log_format: str = "text") -> dict[str, Any]:
    """The ``dictConfig`` that ``sqla-queue worker`` applies: one stderr handler on the root
    logger, so the worker's records, the per-job records and the handlers' own logging all get a
    time and a level. Loggers that exist already (the application's) stay enabled."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    formatter = {"()": JsonFormatter} if log_format == "json" else {"format": TEXT_FORMAT}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"sqla_queue": formatter},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "sqla_queue",
                                "stream": "ext://sys.stderr"}},
        "root": {"level": level.upper(), "handlers": ["stderr"]},
    }
