"""The plugin contract: every hook sqla_queue calls, with its arguments and return rules.

Hook names are public API. Specs gain keyword arguments over time; they never lose or rename
one. An implementation may accept any subset of a spec's arguments (pluggy's opt-in
arguments), so new ones never break existing plugins.

Two kinds of hooks:

* **Strategy hooks** are ``firstresult``: plugins are asked in order (explicit ``plugins=``
  first, then entry points, finally the built-in defaults, which are registered ``trylast``)
  and the first answer that is not ``None`` wins. Returning ``None`` means "no opinion".
* **Lifecycle events** are fire-and-forget notifications, one per event, each with a frozen
  dataclass payload (docs/reference/events.md). They run on the hot path: implementations must
  return quickly and must not block. An exception raised by one is logged and swallowed; it
  never changes what happens to the job.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal, Mapping

import pluggy

from .types import (
    ClaimedJob,
    EmptyClaim,
    JobClaimed,
    JobCompleted,
    JobEnqueued,
    JobFailed,
    JobRecovered,
    JobRetried,
    LostClaim,
)

PROJECT_NAME = "sqla_queue"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec(firstresult=True)
def sqla_queue_retry_delay(
    job: ClaimedJob, error: BaseException, attempt: int
) -> timedelta | Literal[False] | None:
    """How long to wait before the next attempt of a job whose handler raised.

    Called by the worker after a retryable failure, while the job still has attempts left.

    :param job: the claimed job (``job.attempts`` equals ``attempt``).
    :param error: the exception the handler raised.
    :param attempt: the attempt that just failed, starting at 1.
    :return: a non-negative ``timedelta`` to wait (measured on the database's clock);
        ``False`` to give up now (the job goes to ``failed``); ``None`` for no opinion.
        Anything else is reported as a `PluginError` naming the plugin.

    The built-in default is exponential backoff with full jitter and a cap.
    """


@hookspec(firstresult=True)
def sqla_queue_is_retryable(job: ClaimedJob, error: BaseException) -> bool | None:
    """Whether a handler's exception deserves another attempt.

    :return: ``True`` to retry (if attempts remain), ``False`` to fail the job now, ``None``
        for no opinion. The built-in default retries everything except
        `sqla_queue.errors.NonRetryableError` and unknown tasks.
    """


@hookspec(firstresult=True)
def sqla_queue_idempotency_key(
    task: str, payload: Mapping[str, Any], options: Mapping[str, Any]
) -> str | None:
    """A dedupe key for a job about to be enqueued without an explicit ``idempotency_key=``.

    Called once per job in ``enqueue``/``enqueue_many``, before anything is written. An
    explicit ``idempotency_key=`` argument always wins and this hook is then not called.

    :param task: the task name.
    :param payload: the payload (do not mutate it).
    :param options: the other enqueue options: ``queue``, ``max_attempts``, ``run_at``,
        ``delay``.
    :return: a non-empty string, or ``None`` for no key (the built-in default).
    """


@hookspec
def sqla_queue_job_enqueued(event: JobEnqueued) -> None:
    """A job was enqueued (or an enqueue was collapsed onto an active job with its key).

    Fired after the statement ran. When the enqueue is part of a caller's transaction, that
    transaction may still roll back. Hot path.
    """


@hookspec
def sqla_queue_job_claimed(event: JobClaimed) -> None:
    """A job was claimed and its claim committed. Hot path."""


@hookspec
def sqla_queue_job_completed(event: JobCompleted) -> None:
    """A job's completion committed under its claim token. Hot path."""


@hookspec
def sqla_queue_job_retried(event: JobRetried) -> None:
    """A failed attempt was recorded and the job is pending again at ``event.run_at``."""


@hookspec
def sqla_queue_job_failed(event: JobFailed) -> None:
    """A job reached the terminal ``failed`` state (gave up, or attempts exhausted)."""


@hookspec
def sqla_queue_job_recovered(event: JobRecovered) -> None:
    """Lease recovery took a job from an expired claim: back to pending, or failed."""


@hookspec
def sqla_queue_lost_claim(event: LostClaim) -> None:
    """An outcome (or heartbeat) found the claim no longer ours; nothing was changed."""


@hookspec
def sqla_queue_empty_claim(event: EmptyClaim) -> None:
    """A claim returned no job. Hot path for idle workers."""
