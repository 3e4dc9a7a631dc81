"""The built-in plugins, registered exactly like third-party plugins (strategies `trylast`).

Each is blockable by its name (``Queue(blocked_plugins=[...])`` or
``SQLA_QUEUE_BLOCKED_PLUGINS``), and blocking one removes it: nothing is called in its place.
A strategy hook nobody answers means "no opinion", whose meaning the hook defines (hookspecs):
no retry-delay opinion retries at once, no retryable opinion retries. There is no built-in
idempotency-key plugin: without a plugin or a per-task option, only an explicit
``idempotency_key=`` deduplicates, and enqueue calls no hook at all.
"""

from . import backoff, logging, retryable

DEFAULT_PLUGINS = (
    ("sqla_queue.backoff", backoff),
    ("sqla_queue.retryable", retryable),
    ("sqla_queue.logging", logging),
)
