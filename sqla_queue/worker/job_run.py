"""One owner of a job's run: claim -> handler -> outcome.

Whoever runs a claimed job -- the worker, on a handler thread or as an asyncio task, or
`sqla_queue.testing` in the calling thread (`run_claimed_job`) -- runs it here, so a job ends
the same way whoever ran it:

* **the call**: the task's handler, through the run middleware (`sqla_queue_handle_job`), with
  the job's `JobContext`;
* **one ladder** for what the call ended with, sync and async alike: a return value is checked
  (JSON, size) and becomes the result; a `Snooze` snoozes; any other exception, `BaseException`
  included (``sys.exit()``, ``KeyboardInterrupt``, an async handler's own ``CancelledError``), is
  the attempt's failure, counted and decided by the strategy hooks; only the worker's own
  cancellation (shutdown, timeout, fence, cancel request) is not the handler's outcome;
* **the outcome**, recorded under the claim token (``ctx.transaction()`` may have committed it
  already), retried through database errors while the lease holds.

`JobRuns` holds the parts every runner shares; `worker.runs.WorkerRuns` adds what the worker
needs on top: handler threads, coroutines on its event loop, the hand-over of completions to
the claim loop, and the outcome thread that records async handlers' failures off the loop.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .. import _validate
from .._sanitize import calls_handlers, from_the_handler_on
from .._tasks import Task
from ..core import Core
from ..core.handler_transaction import HandlerSessions, HandlerTransaction
from ..errors import InvalidInputError, ResultError, Snooze, SnoozeLimitError, UnknownTaskError
from ..plugins.calls import handle_job
from ..types import ClaimedJob, JobContext, JobStatus, Outcome

__all__ = ["JobRuns", "Ran", "calls_handlers", "run_claimed_job"]

logger = logging.getLogger("sqla_queue.worker")


@dataclass(frozen=True)
class Ran:
    """One run of a job: how it ended (`outcome`: ``"completed"``, ``"retried"``, ``"failed"``,
    ``"cancelled"``, ``"snoozed"`` or ``"lost"``), the `result` stored with its completion (the
    handler's return value, or what ``ctx.set_result`` recorded in a committed
    ``ctx.transaction()``; None otherwise) and the `error` it raised (None when it returned)."""

    job: ClaimedJob
    outcome: str
    result: Any = None
    error: BaseException | None = None


def ending_of(error: BaseException) -> BaseException:
    """What an attempt ends with when its call raised `error`: a snooze with a usable delay, or
    the error itself, whatever its class (the ladder's exception half)."""
    if isinstance(error, Snooze):
        return checked_snooze(error)
    if isinstance(error, UnknownTaskError):
        return error
    return from_the_handler_on(error)


def checked_snooze(snooze: Snooze) -> BaseException:
    """A snooze with a usable delay, or the error that fails the attempt instead."""
    try:
        snooze.delay = _validate.snooze_delay(snooze.delay)
    except InvalidInputError as exc:
        return exc
    return snooze


class JobRuns:
    """What every runner of `core`'s jobs shares: the call, the ladder, the outcome."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def task_of(self, job: ClaimedJob) -> Task | None:
        """The job's task; None for one this process does not register (its run then fails)."""
        return self.core.tasks.get(job.task)

    @calls_handlers
    def call(self, job: ClaimedJob, context: JobContext, task: Task | None = None) -> tuple[Task, Any]:
        """Start the handler through the run middleware: its value, or its awaitable. `task`:
        the job's, when the caller has it (a worker looked it up when it took the job)."""
        if task is None:
            task = self.core.tasks.resolve(job.task)
        return task, handle_job(self.core.plugin_manager, job, context,
                                functools.partial(task.handler, job.payload, context))

    @calls_handlers
    def call_here(self, job: ClaimedJob, context: JobContext, await_awaitable: Callable[[Awaitable[Any]], Any],
                  task: Task | None = None) -> tuple[Any, BaseException | None]:
        """Call the handler in this thread: ``(result to store, None)`` or ``(None, what the
        attempt ends with)``. A returned awaitable (an ``async def`` handler's coroutine, or a
        synchronous wrapper's) is run to its end by `await_awaitable`."""
        try:
            task, value = self.call(job, context, task)
            if value is not None and inspect.isawaitable(value):
                value = await_awaitable(value)
            return self.checked(task, value)
        except BaseException as exc:  # a handler's failure is data, whatever it raised
            return None, ending_of(exc)

    def checked(self, task: Task, value: Any) -> tuple[Any, BaseException | None]:
        """The ladder's value half: a returned `Snooze` snoozes; a value with no JSON form (or
        too large) fails the attempt; anything else is the result to store."""
        if isinstance(value, Snooze):
            return None, checked_snooze(value)
        if value is not None:
            try:
                self.core.outcomes.result_text(value, f"task {task.name!r}")
            except ResultError as exc:
                return None, exc
        return value, None

    def record(self, job: ClaimedJob, result: Any, error: BaseException | None) -> str:
        """Record how the run ended under the claim token; returns the outcome's name (`Ran`)."""
        outcomes = self.core.outcomes
        if error is None:
            text = outcomes.result_text(result, f"task {job.task!r}")
            return "completed" if outcomes.complete(job.id, job.claim_token, text) else "lost"
        if isinstance(error, Snooze):
            over_limit = self._over_snooze_limit(job)
            if over_limit is None:
                return _outcome_name(outcomes.snooze(job, error.delay), "snoozed")
            error = over_limit
        return _outcome_name(outcomes.handle_failure(job, error), "retried")

    def _over_snooze_limit(self, job: ClaimedJob) -> BaseException | None:
        task = self.task_of(job)
        limit = 0 if task is None else task.max_snoozes
        if job.snoozes < limit:
            return None
        return SnoozeLimitError(f"job {job.id} of task {job.task!r} already snoozed {job.snoozes} times, "
                                f"its task's max_snoozes: this attempt fails instead")


def settled_by_transaction(transaction: HandlerTransaction | None, job: ClaimedJob, result: Any,
                           error: BaseException | None) -> str | None:
    """``"completed"`` when the handler's ``ctx.transaction()`` committed the completion,
    ``"lost"`` when it found the claim lost (reported already), None when the runner records the
    outcome as usual. Whatever the handler did after a commit cannot change its job's end."""
    if transaction is None or transaction.outcome not in (HandlerTransaction.COMMITTED, HandlerTransaction.LOST):
        return None
    if transaction.outcome == HandlerTransaction.LOST:
        return "lost"
    if error is not None:
        logger.warning("job %s: the handler raised %s after its ctx.transaction() committed; the job "
                       "stays completed", job.id, type(error).__name__)
    elif result is not None:
        logger.warning("job %s: the handler returned a value after its ctx.transaction() committed; "
                       "it is not stored (ctx.set_result inside the block stores one)", job.id)
    return "completed"


def run_claimed_job(core: Core, job: ClaimedJob, *,
                    await_coroutine: Callable[[Awaitable[Any]], Any] | None = None) -> Ran:
    """Run `job` (claimed already) in the calling thread as a worker would, and record its
    outcome. `await_coroutine` runs an async handler's coroutine to its end (default: a new
    event loop, `asyncio.run`)."""
    runs = JobRuns(core)
    cancel = threading.Event()
    transaction = core.handler_transaction(job, cancel, HandlerSessions(core.engine, core.executor))
    task = runs.task_of(job)
    context = job.context(cancel, lambda: transaction, is_async=task is not None and task.is_async,
                          dependency_results=core.workflow_reads)
    result, error = runs.call_here(job, context, await_coroutine or _run_to_end)
    outcome = settled_by_transaction(transaction, job, result, error)
    if outcome is None:
        outcome = runs.record(job, result, error)
    else:
        result = transaction.result
    return Ran(job, outcome, result if outcome == "completed" else None, error)


def _outcome_name(outcome: Outcome | None, pending_means: str) -> str:
    if outcome is None:
        return "lost"
    if outcome.status is JobStatus.PENDING:
        return pending_means
    return outcome.status.value


def _run_to_end(awaitable: Awaitable[Any]) -> Any:
    async def awaited() -> Any:
        return await awaitable

    return asyncio.run(awaited())
