"""The default strategies, registered exactly like third-party plugins (strategies `trylast`).

Each is blockable by its name (``Queue(blocked_plugins=[...])`` or
``SQLA_QUEUE_BLOCKED_PLUGINS``). Blocking a default strategy leaves "no opinion": with no other
plugin answering, a retry happens at once and no dedupe key is set.
"""

from . import backoff, idempotency, logging, retryable

DEFAULT_PLUGINS = (
    ("sqla_queue.backoff", backoff),
    ("sqla_queue.retryable", retryable),
    ("sqla_queue.idempotency", idempotency),
    ("sqla_queue.logging", logging),
)
