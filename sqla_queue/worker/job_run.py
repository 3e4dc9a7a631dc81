"""One run of a claimed job, the part every runner shares: what a handler's return value or
exception means for its job, and recording that under the claim token.

The worker runs handlers on threads and an event loop, with leases and timeouts around them;
`sqla_queue.testing` and tools that run jobs without a worker run them in the calling thread
with `run_claimed_job`, which returns a `Ran`. Both decide and record outcomes here, so a job
ends the same way whoever ran it. The other functions are the worker's.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .. import _validate
from ..core.handler_transaction import HandlerSessions, HandlerTransaction
from ..errors import InvalidInputError, ResultError, Snooze, SnoozeLimitError, UnknownTaskError
from ..types import ClaimedJob, JobContext, JobStatus, Outcome

if TYPE_CHECKING:
    from .._tasks import Task
    from ..queue import Queue

__all__ = ["Ran", "run_claimed_job"]

logger = logging.getLogger("sqla_queue.worker")
F = TypeVar("F", bound=Callable[..., Any])


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


_HANDLER_CALLERS: set[Any] = set()


def calls_handlers(function: F) -> F:
    """Mark `function` as one that calls handlers: `from_the_handler_on` drops its frame."""
    _HANDLER_CALLERS.add(function.__code__)
    return function


def from_the_handler_on(error: Exception) -> Exception:
    """`error` without the runner's own frame at the top of its traceback: the stored and
    logged traceback then starts in the user's handler, where the failure is."""
    tb = error.__traceback__
    if tb is not None and tb.tb_frame.f_code in _HANDLER_CALLERS and tb.tb_next is not None:
        return error.with_traceback(tb.tb_next)
    return error


def run_claimed_job(queue: Queue, job: ClaimedJob, *,
                    await_coroutine: Callable[[Awaitable[Any]], Any] | None = None) -> Ran:
    """Run `job` (claimed already) in the calling thread as a worker would, and record its
    outcome. `await_coroutine` runs an async handler's coroutine to its end (default: a new
    event loop, `asyncio.run`)."""
    cancel = threading.Event()
    transaction = queue.handler_transaction(job, cancel, HandlerSessions.of(queue))
    context = job.context(cancel, lambda: transaction)
    result, error = call_handler(queue, job, context, await_coroutine or _run_to_end)
    outcome = settled_by_transaction(transaction, job, result, error)
    if outcome is None:
        outcome = record_outcome(queue, job, result, error)
    else:
        result = transaction.result
    return Ran(job, outcome, result if outcome == "completed" else None, error)


@calls_handlers
def call_handler(queue: Queue, job: ClaimedJob, context: JobContext,
                 await_awaitable: Callable[[Awaitable[Any]], Any]) -> tuple[Any, BaseException | None]:
    """Call `job`'s handler in this thread: ``(result to store, None)``, or ``(None, what the
    attempt ends with)``. A returned awaitable (an ``async def`` handler's coroutine, or a
    synchronous wrapper's) is run to its end by `await_awaitable`."""
    try:
        task = queue.get_task(job.task)
        value = task.handler(job.payload, context)
        if inspect.isawaitable(value):
            value = await_awaitable(value)
        return checked_result(queue, task, value)
    except UnknownTaskError as exc:
        return None, exc
    except Snooze as snooze:
        return None, checked_snooze(snooze)
    except Exception as exc:  # a handler's failure is data: it decides retry or fail
        return None, from_the_handler_on(exc)


def checked_result(queue: Queue, task: Task, value: Any) -> tuple[Any, BaseException | None]:
    """``(result to store, None)``, or ``(None, what the attempt fails or snoozes with)``: a
    returned `Snooze` snoozes, a value with no JSON form (or too large) fails the attempt."""
    if isinstance(value, Snooze):
        return None, checked_snooze(value)
    if value is not None:
        try:
            _validate.result_json(value, f"task {task.name!r}", queue.max_result_bytes)
        except ResultError as exc:
            return None, exc
    return value, None


def checked_snooze(snooze: Snooze) -> BaseException:
    """A snooze with a usable delay, or the error that fails the attempt instead."""
    try:
        snooze.delay = _validate.snooze_delay(snooze.delay)
    except InvalidInputError as exc:
        return exc
    return snooze


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


def record_outcome(queue: Queue, job: ClaimedJob, result: Any, error: BaseException | None) -> str:
    """Record how the run ended under the claim token; returns the outcome's name (`Ran`)."""
    if error is None:
        return "completed" if queue.complete(job.id, job.claim_token, result=result) else "lost"
    if isinstance(error, Snooze):
        over_limit = _over_snooze_limit(queue, job)
        if over_limit is None:
            return _outcome_name(queue.snooze(job, error.delay), "snoozed")
        error = over_limit
    return _outcome_name(queue.handle_failure(job, error), "retried")


def _over_snooze_limit(queue: Queue, job: ClaimedJob) -> BaseException | None:
    try:
        limit = queue.get_task(job.task).max_snoozes
    except UnknownTaskError:
        limit = 0
    if job.snoozes < limit:
        return None
    return SnoozeLimitError(f"job {job.id} of task {job.task!r} already snoozed {job.snoozes} times, "
                            f"its task's max_snoozes: this attempt fails instead")


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
