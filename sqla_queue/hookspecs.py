"""The plugin contract: every hook sqla_queue calls, with its arguments and return rules.

Hook names are public API. Specs gain keyword arguments over time; they never lose or rename
one. An implementation may accept any subset of a spec's arguments (pluggy's opt-in
arguments), so new ones never break existing plugins.

Three kinds of hooks:

* **Strategy hooks** are ``firstresult``, called through pluggy: plugins are asked in order
  (after the per-task options given to ``@queue.task``, which are asked before the hook is
  called: ``tryfirst`` implementations, then explicit ``plugins=`` in reverse order of
  registration, then entry points, finally the built-in defaults, which are registered
  ``trylast``) and the first answer that is not ``None`` wins. Returning ``None`` means "no
  opinion"; what no answer at all means is said per hook. An answer outside the contract, or
  an exception, becomes a `sqla_queue.PluginError` naming the plugin. Implementations must be
  pure: to name the plugin behind an answer outside the contract, they are asked again alone.
* **Lifecycle events** are fire-and-forget notifications, one per event, each with a frozen
  dataclass payload (docs/reference/events.md). They run on the hot path: implementations must
  return quickly and must not block. An exception raised by one is logged with its name and
  swallowed, the other implementations are still called; it never changes what happens to the
  job.
* **Run middleware** (`sqla_queue_handle_job`) wraps every handler call: each implementation
  gets ``call_next`` and decides what happens around it, the first registered outermost
  (pluggy's order). It can change a job's outcome, so it is opt-in like a strategy.
* **Enqueue metadata** (`sqla_queue_job_meta`) adds keys to a job's ``meta`` as it is
  enqueued (trace context, a tenant); every answer is merged. Also opt-in.
* Hook wrappers (``hookwrapper=True``, ``wrapper=True``) are refused at registration with a
  `sqla_queue.ConfigurationError`: they could replace any other plugin's answer or exception.
* **Setup**: `sqla_queue_configure` runs once per Queue, when it is built.

docs/reference/hooks.md documents each hook with this exact signature; a test keeps the two in
step.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, Mapping

import pluggy

from .types import BatchCommitted, ClaimedJob, JobContext

if TYPE_CHECKING:  # annotations only: the payloads' module loads with the first event built (`types`)
    from .events import (
        EmptyClaim,
        JobCancelled,
        JobClaimed,
        JobCompleted,
        JobEnqueued,
        JobFailed,
        JobRecovered,
        JobRetried,
        JobSnoozed,
        LostClaim,
    )

PROJECT_NAME = "sqla_queue"
"""The pluggy project name and the entry-point group plugins register under."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

LIFECYCLE_HOOKS = (
    "sqla_queue_job_enqueued",
    "sqla_queue_job_claimed",
    "sqla_queue_job_completed",
    "sqla_queue_job_retried",
    "sqla_queue_job_failed",
    "sqla_queue_job_snoozed",
    "sqla_queue_job_cancelled",
    "sqla_queue_job_recovered",
    "sqla_queue_lost_claim",
    "sqla_queue_empty_claim",
    "sqla_queue_batch_committed",
)
"""The lifecycle (event) hooks, in the order a job meets them: notifications after the fact,
whose return value is ignored and whose exceptions are logged and swallowed."""

OBSERVER_HOOKS = (*LIFECYCLE_HOOKS, "sqla_queue_configure")
"""Hooks that cannot change what happens to a job: an installed plugin made only of these is
registered by every Queue that loads entry points; any other hook makes it opt-in by name.
``sqla_queue_configure`` is one: nothing it returns is acted on, and it is where an observer
keeps the Queue (to read ``queue.stats()`` at scrape time)."""


# -- strategies ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def sqla_queue_retry_delay(
    job: ClaimedJob, error: BaseException, attempt: int
) -> timedelta | Literal[False] | None:
    """How long to wait before the next attempt of a job whose handler raised.

    Called by ``Queue.handle_failure`` (the worker calls it for every handler exception) after
    `sqla_queue_is_retryable` did not say ``False``, and only while the job has attempts left:
    on its last attempt the job fails without asking. Called once per failed attempt, on the
    worker's thread, between the handler's return and the retry statement: keep it cheap.

    :param job: the claimed job (``job.attempts`` equals ``attempt``; ``job.task``,
        ``job.queue``, ``job.max_attempts`` and ``job.id`` are there to decide per task).
    :param error: the exception the handler raised.
    :param attempt: the attempt that just failed, starting at 1.
    :return: a non-negative ``timedelta`` to wait, measured on the database's clock from the
        moment the retry is recorded; ``False`` to give up now (the job goes to ``failed``);
        ``None`` for no opinion (no answer at all: retry at once). Anything else (a number, a
        negative delay, ``True``) or an exception is logged as a `PluginError` naming the
        plugin, which is left out, and the remaining registered plugins decide that failure: a
        broken plugin never strands a job.

    The built-in default (``sqla_queue.backoff``) is exponential backoff with equal jitter,
    capped at one hour (docs/explanation/retries.md). A per-task ``@queue.task(retry_delay=...)`` is asked before any plugin.
    """


@hookspec(firstresult=True)
def sqla_queue_is_retryable(job: ClaimedJob, error: BaseException) -> bool | None:
    """Whether a handler's exception deserves another attempt.

    Called by ``Queue.handle_failure`` once per failed attempt, before
    `sqla_queue_retry_delay`. Not hot: only failures reach it.

    :param job: the claimed job whose handler raised.
    :param error: the exception the handler raised.
    :return: ``True`` to retry (if attempts remain), ``False`` to fail the job now, ``None``
        for no opinion (no answer at all: retryable). Anything else, or an exception, is logged
        as a `PluginError` naming the plugin, which is left out, and the remaining registered
        plugins decide that failure. The built-in default (``sqla_queue.retryable``) retries
        everything except `sqla_queue.NonRetryableError` and unknown tasks.

    Not asked for an error that the task's own ``retry_on=`` / ``no_retry_on=`` rule out: the
    job fails at once (docs/explanation/retries.md).
    """


@hookspec(firstresult=True)
def sqla_queue_idempotency_key(
    task: str, payload: Mapping[str, Any], options: Mapping[str, Any]
) -> str | None:
    """A dedupe key for a job about to be enqueued without an explicit ``idempotency_key=``.

    Called once per job in ``enqueue``/``enqueue_many``, in the caller's thread, after the
    payload was validated and before anything is written: on the enqueue hot path. An explicit
    ``idempotency_key=`` argument always wins and this hook is then not called. The database
    enforces the key (a partial unique index over pending and running jobs): while a job with
    the key is active, enqueue returns that job's id instead of inserting.

    :param task: the task name.
    :param payload: the payload, a JSON-serializable dict (do not mutate it).
    :param options: the other enqueue options, resolved: ``queue`` (str), ``max_attempts``
        (int), ``run_at`` (aware datetime or None), ``delay`` (timedelta, float or None).
    :return: a non-empty string of at most 512 printable characters, or ``None`` for no key.
        No built-in plugin implements it: without one, enqueue calls no hook. Anything else,
        or an exception, is a `PluginError` naming the plugin, raised from ``enqueue`` before
        anything is written.

    A per-task ``@queue.task(idempotency_key=...)`` is asked before any plugin.
    """


@hookspec
def sqla_queue_job_meta(task: str, payload: Mapping[str, Any], options: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Keys to store in the ``meta`` of a job about to be enqueued (the handler reads them as
    ``ctx.meta``, every attempt alike): the enqueuing request's trace context, a tenant, a
    correlation id.

    Called once per job in ``enqueue``/``enqueue_many`` (and their asyncio faces), in the
    caller's thread and context, after the payload was validated and before anything is
    written: on the enqueue hot path. Every implementation is asked; their mappings are merged,
    the one pluggy asks first (``tryfirst``, then the plugin registered last) winning a key two
    of them give, and the ``meta=`` the caller passed to ``enqueue`` winning over all of them.

    :param task: the task name.
    :param payload: the payload (do not mutate it).
    :param options: the other enqueue options, resolved, as for `sqla_queue_idempotency_key`.
    :return: a mapping of string keys to JSON values, or ``None`` for nothing to add. Anything
        else, or an exception, is a `PluginError` naming the plugin, raised from ``enqueue``
        before anything is written.
    """


# -- run middleware ---------------------------------------------------------------------


@hookspec
def sqla_queue_handle_job(job: ClaimedJob, ctx: JobContext, call_next: Callable[[], Any]) -> Any:
    """Middleware around every handler call: tracing, error reporting, timing, per-task policy.

    Called for each attempt of each job, on the thread that runs a synchronous handler or in
    the asyncio task that runs an ``async def`` one, right around the handler: ``call_next()``
    calls the next middleware, the last one calls the handler. Implementations nest in pluggy's
    order (``tryfirst`` outermost, then the plugins registered last, ``trylast`` innermost).

    Return what ``call_next()`` returned (the handler's value, stored as the job's result), or
    something else to replace it; an exception raised here is the attempt's failure, as if the
    handler had raised it. Not calling ``call_next`` skips the handler.

    For an ``async def`` handler (``ctx.is_async``), ``call_next()`` returns an awaitable: return
    an awaitable too, e.g. from a coroutine of your own that awaits ``call_next()`` inside your
    span, so the work you wrap is the handler's run, not the creation of its coroutine::

        @sqla_queue.hookimpl
        def sqla_queue_handle_job(job, ctx, call_next):
            if ctx.is_async:
                async def traced():
                    with span(job):
                        return await call_next()
                return traced()
            with span(job):
                return call_next()

    Opt-in by name like a strategy (it can change a job's outcome). No built-in implements it:
    without one, the handler is called directly.
    """


# -- lifecycle events ---------------------------------------------------------------------


@hookspec
def sqla_queue_job_enqueued(event: JobEnqueued) -> None:
    """A job was enqueued, or an enqueue was collapsed onto an active job holding its key.

    Fired once per job after the INSERT ran, in the caller's thread. When the enqueue is part
    of a caller's transaction (``session=``/``connection=``), that transaction may still roll
    back. Hot path. Return value ignored; an exception is logged and swallowed.
    """


@hookspec
def sqla_queue_job_claimed(event: JobClaimed) -> None:
    """A job was claimed and its claim committed, before its handler runs.

    Fired once per job of a claim, in the claiming thread. Hot path. Return value ignored; an
    exception is logged and swallowed.
    """


@hookspec
def sqla_queue_job_completed(event: JobCompleted) -> None:
    """A job's completion committed under its claim token.

    Fired after the commit, in the worker's thread. Hot path. Return value ignored; an
    exception is logged and swallowed.
    """


@hookspec
def sqla_queue_job_retried(event: JobRetried) -> None:
    """A failed attempt was recorded and the job is pending again at ``event.run_at``.

    ``event.exception`` is what the handler raised (None for an outcome recorded from a
    string), for in-process error reporters; ``event.traceback`` is the bounded, sanitized
    text stored on the job. Fired after the commit. Return value ignored; an exception is logged and swallowed.
    """


@hookspec
def sqla_queue_job_failed(event: JobFailed) -> None:
    """A job reached the terminal ``failed`` state through an outcome call.

    Causes: the handler's error was not retryable, the retry delay said ``False``, or the
    attempt was the last. (Jobs failed by lease recovery fire `sqla_queue_job_recovered` with
    ``status`` failed instead.) ``event.exception`` and ``event.traceback`` as for
    `sqla_queue_job_retried`. Fired after the commit. Return value ignored; an exception is
    logged and swallowed.
    """


@hookspec
def sqla_queue_job_cancelled(event: JobCancelled) -> None:
    """A job ended ``cancelled``: a pending job at `Queue.cancel` (``requested_while_running``
    False), or a running one whose worker recorded its outcome after the cancel request.

    Fired after the commit. (A cancel-requested job taken by lease recovery fires
    `sqla_queue_job_recovered` with ``status`` cancelled instead.) Return value ignored; an
    exception is logged and swallowed.
    """


@hookspec
def sqla_queue_job_snoozed(event: JobSnoozed) -> None:
    """A handler snoozed its job (`sqla_queue.Snooze`): pending again at ``event.run_at`` with
    the attempt given back. Fired after the commit. Return value ignored; an exception is
    logged and swallowed.
    """


@hookspec
def sqla_queue_job_recovered(event: JobRecovered) -> None:
    """Lease recovery took a job from an expired claim: back to pending, failed, or cancelled
    (a cancel had been requested).

    Fired once per job after the recovery batch committed (a worker's periodic pass,
    ``queue.recover_expired`` or ``sqla-queue recover``). Return value ignored; an exception is
    logged and swallowed.
    """


@hookspec
def sqla_queue_lost_claim(event: LostClaim) -> None:
    """An outcome or heartbeat found the claim no longer ours; nothing was changed.

    Fired when ``complete``, ``retry``, ``fail`` or a lease renewal updated zero rows (the job
    was recovered, reclaimed or changed by an operator), and when a worker fences itself off a
    job whose lease it could not renew in time (``operation`` ``"fence"``). Return value
    ignored; an exception is logged and swallowed.
    """


@hookspec
def sqla_queue_empty_claim(event: EmptyClaim) -> None:
    """A claim returned no job.

    Fired by every claim that found nothing due, so it is hot for idle workers polling. Return
    value ignored; an exception is logged and swallowed.
    """


@hookspec
def sqla_queue_batch_committed(event: BatchCommitted) -> None:
    """A claim round or a completion flush committed, having claimed or completed at least one
    job: the batch as a whole (the per-job events say what happened to each job).

    Fired once per batch after its commit, in the thread that ran it, after that batch's per-job
    events. For tracing a batch as a span of its own (``event.started_at``, ``event.duration``)
    and linking it to the jobs' spans (``event.claimed``, ``event.completed``). Hot path. Return
    value ignored; an exception is logged and swallowed.
    """


# -- setup --------------------------------------------------------------------------------


@hookspec
def sqla_queue_configure(queue: Any) -> None:
    """A Queue (`sqla_queue.Queue`) was built and every plugin is registered.

    Called once per Queue at the end of its constructor, before any task is registered. Use it
    to keep a reference to the queue (for example to read ``queue.stats()`` at scrape time) or
    to start a side service the plugin owns. Return value ignored. An exception is a
    `PluginError` naming the plugin and the Queue is not built: a plugin that cannot set itself
    up should say so at start-up, not on the first job.
    """
