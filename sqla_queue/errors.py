"""Exceptions raised by sqla_queue.

Every message names the bad input, so a caller (or the CLI) can print it as is. None of them
carries payload contents or bound SQL parameters: payloads can hold secrets.
"""

from __future__ import annotations

from datetime import timedelta


class SqlaQueueError(Exception):
    """Base class for every error this library raises on purpose."""


class ConfigurationError(SqlaQueueError, ValueError):
    """A Queue, worker or engine was set up with an invalid option."""


class InvalidInputError(SqlaQueueError, ValueError):
    """An argument to enqueue, claim or an outcome call is malformed; nothing was written."""


class PayloadError(InvalidInputError):
    """The payload cannot be stored as JSON (not serializable, NaN/Infinity, NUL characters), or
    its JSON is larger than the task's `max_payload_bytes`."""


class ResultError(SqlaQueueError, ValueError):
    """A handler returned a value that cannot be stored as its result (not JSON, or over the
    queue's ``max_result_bytes``): that attempt fails with this error."""


class UnknownTaskError(SqlaQueueError, LookupError):
    """A task name that no `@queue.task` registered."""


class DuplicateTaskError(ConfigurationError):
    """Two handlers were registered under one task name."""


class PluginError(SqlaQueueError):
    """A plugin returned something its hook contract does not allow."""


class DatabaseError(SqlaQueueError):
    """A database call failed; the message is sanitized (no parameters, no DETAIL lines)."""


class PermissionDeniedError(DatabaseError):
    """The database refused a statement for lack of a privilege (SQLSTATE 42501): the role in
    use lacks a grant that docs/how-to/database-roles.md lists for its part. Retrying cannot
    help, so a worker stops with this error instead of retrying forever."""


class EnqueueConflictError(DatabaseError):
    """An idempotent enqueue could neither insert nor find the job holding its key.

    Happens only when the caller's own transaction runs at REPEATABLE READ or SERIALIZABLE and
    the key holder committed after that transaction's snapshot was taken.
    """


class NonRetryableError(SqlaQueueError):
    """Raise from a handler to fail the job now, whatever attempts remain."""


class JobStateError(SqlaQueueError):
    """An operator action found the job in a state it does not apply to (retry a job that is not
    failed, cancel one that already finished) or held by another transaction; nothing was changed.
    The message says which, so the caller can decide whether to try again."""


class LostClaimError(SqlaQueueError):
    """The job's claim is no longer this worker's (its lease was recovered, another worker
    claimed it, an operator changed it): raised out of ``ctx.transaction()``, whose writes were
    rolled back with the completion that could not be recorded."""


class JobCancelledError(SqlaQueueError):
    """Recorded as the error of a job cancelled on request (`Queue.cancel`) while its worker
    held it: before its handler started, or when an async handler was cancelled."""


class SnoozeLimitError(SqlaQueueError):
    """A handler snoozed a job more often than its task's ``max_snoozes``: that attempt fails
    with this error instead (retried like any error while attempts remain)."""


class WaitTimeoutError(SqlaQueueError, TimeoutError):
    """`Queue.wait` gave up: the job had not finished within the timeout."""


class Snooze(Exception):
    """Raise from a handler (or ``return ctx.snooze(delay)``) to run the job again after `delay`
    (a timedelta or seconds) without spending an attempt.

    Not an error: the attempt is handed back, ``last_error`` is untouched, and no retry strategy
    is asked. A task's ``max_snoozes`` bounds how often a job may snooze; past it the attempt
    fails like any other error, so a handler that always snoozes cannot keep a job forever.
    """

    def __init__(self, delay: timedelta | float) -> None:
        # Checked where it is acted on (`Queue.snooze`, the worker): a bad delay fails that
        # attempt with an error naming it, like any other mistake in a handler.
        self.delay = delay
        super().__init__(f"snooze for {delay!r}")
