"""Attribute names: the OpenTelemetry messaging semantic conventions, and sqla_queue's own
(``sqla_queue.*``) where the conventions have no name for a thing."""

MESSAGING_SYSTEM = "messaging.system"
DESTINATION = "messaging.destination.name"
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
MESSAGE_ID = "messaging.message.id"
BATCH_COUNT = "messaging.batch.message_count"
ERROR_TYPE = "error.type"

SYSTEM = "sqla_queue"
"""``messaging.system``: not one of the conventions' well-known values, which allow others."""

TASK = "sqla_queue.task"
ATTEMPT = "sqla_queue.job.attempt"
"""The attempt, from 1: the delivery count (the conventions name one per broker only)."""
MAX_ATTEMPTS = "sqla_queue.job.max_attempts"
OUTCOME = "sqla_queue.job.outcome"
"""How the handler's run ended: ``success``, ``error`` or ``snoozed`` (the job's state after
it, retried or failed, is the worker's decision and shows on the metrics)."""
DEDUPLICATED = "sqla_queue.job.deduplicated"
CLAIMED = "sqla_queue.batch.claimed"
COMPLETED = "sqla_queue.batch.completed"
WORKER_ID = "sqla_queue.worker.id"
LINK_KIND = "sqla_queue.link"
