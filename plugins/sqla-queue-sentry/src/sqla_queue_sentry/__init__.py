"""Sentry error reporting for sqla_queue, registered through the ``sqla_queue`` entry point
``sentry``.

Every handler exception is reported through the Sentry client the application set up with
``sentry_sdk.init()``, tagged with the job's queue, task, attempt, id and idempotency key and
grouped by task and exception type; the final failure is an ``error`` event, a retried attempt a
breadcrumb unless configured otherwise (`SentryReporter`, ``SQLA_QUEUE_SENTRY_RETRIES``); the
payload's values are scrubbed from every event of the job. It wraps each handler call (run
middleware), so it takes part only when enabled by name: ``Queue(plugins=["sentry"])``,
``SQLA_QUEUE_PLUGINS=sentry`` or ``sqla-queue --plugin sentry``.
"""

from ._reporter import RETRIES_ENV, RETRY_MODES, SentryReporter
from ._scrub import FILTERED

plugin = SentryReporter()
"""The instance the entry point registers: retry mode from ``SQLA_QUEUE_SENTRY_RETRIES``
(default ``breadcrumb``), payload scrubbed."""

__all__ = ["FILTERED", "RETRIES_ENV", "RETRY_MODES", "SentryReporter", "plugin"]
