"""The default strategies, registered exactly like third-party plugins (strategies `trylast`)."""

from . import backoff, idempotency, logging, retryable

DEFAULT_PLUGINS = (
    ("sqla_queue.backoff", backoff),
    ("sqla_queue.retryable", retryable),
    ("sqla_queue.idempotency", idempotency),
    ("sqla_queue.logging", logging),
)
