"""A job a worker holds, and the state it is in there: shared by the worker's handler threads,
its claim loop and its lease keeper, each of which may decide the job's fate."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..types import ClaimedJob, JobContext

if TYPE_CHECKING:
    from .._batches import WorkflowReads
    from .._tasks import Task
    from ..core.handler_transaction import HandlerTransaction


class CancelFlag:
    """A job's cancel request as its context and handler transaction read it (``is_set``):
    a plain attribute, written once under the held job's lock. A `threading.Event` per job
    would cost a lock and a condition for something nobody waits on."""

    __slots__ = ("requested",)

    def __init__(self) -> None:
        self.requested = False

    def is_set(self) -> bool:
        return self.requested


class HeldJob:
    """A claimed job and its state in this worker.

    ``running`` (claimed; the handler has not finished) -> ``completing`` (the handler
    succeeded; the completion waits for the claim loop's next transaction) -> ``settled`` (the
    outcome is recorded, or the job was given up: timed out, fenced, lost or released).
    Transitions are compare-and-set, so exactly one party decides each job's fate.
    """

    RUNNING, COMPLETING, SETTLED = "running", "completing", "settled"

    def __init__(self, job: ClaimedJob, task: Task | None,
                 transaction_for: Callable[[HeldJob], HandlerTransaction] | None = None,
                 dependency_results: WorkflowReads | None = None) -> None:
        """`task` None: one this process does not register (its run fails saying so);
        `dependency_results` reads ``ctx.dependency_results``."""
        now = time.monotonic()
        timeout = None if task is None else task.timeout
        self.job = job
        self.task = task
        # By claim, not by job: how the worker's slots know it (the same job claimed again
        # after its lease ran out is another claim).
        self.key: tuple[int, str] = (job.id, job.claim_token)
        self.timeout: timedelta | None = timeout
        self.is_async = task is not None and task.is_async
        self.lease_confirmed = now  # monotonic time at which the lease was last known renewed
        self.start_at = now + job.start_after  # monotonic time before which its handler waits (a rate's token)
        self.handler_deadline: float | None = None  # set when a handler takes the job (`start_deadline`)
        self.started = False
        self.state = self.RUNNING
        self.cancel: Callable[[], None] | None = None  # an async handler's: cancels its coroutine
        self._cancel_requested = CancelFlag()
        self._lock = threading.Lock()
        # What ``ctx.transaction()`` returns, made when the handler first asks: a block that
        # commits (or finds the claim lost) settles the job then, while the handler may run on.
        self.transaction: HandlerTransaction | None = None
        self._transaction_for = transaction_for
        self._dependency_results = dependency_results
        self.result: Any = None  # the handler's return value, stored with the completion

    def handler_context(self) -> JobContext:
        """The `JobContext` for the handler that takes the job, built then (a job given back
        before its handler started never needs one). Not kept here: the context reaches back
        to this job (``ctx.transaction()``), and a job holding its context would be a cycle
        of about fifteen objects per job that only the cyclic garbage collector frees, which
        cost a busy worker a fifth of its CPU."""
        return self.job.context(
            self._cancel_requested, None if self._transaction_for is None else self._handler_transaction,
            is_async=self.is_async, dependency_results=self._dependency_results)

    def _handler_transaction(self) -> HandlerTransaction:
        if self.transaction is None:
            self.transaction = self._transaction_for(self)  # type: ignore[misc]
        return self.transaction

    def start_deadline(self) -> None:
        """A handler takes the job: its task's timeout counts from now, not from the claim (a
        prefetched job may wait in the worker's buffer first)."""
        if self.timeout is not None:
            self.handler_deadline = time.monotonic() + self.timeout.total_seconds()

    def move(self, to: str, *, allowed: tuple[str, ...] = (RUNNING,)) -> bool:
        with self._lock:
            if self.state not in allowed:
                return False
            self.state = to
            return True

    @property
    def running(self) -> bool:
        return self.state == self.RUNNING

    def give_up(self) -> bool:
        """Settle a running job without an outcome of the handler's (timed out, fenced, lost):
        True for the one caller that did it."""
        return self.move(self.SETTLED)

    def request_cancel(self) -> bool:
        """Someone asked to cancel the job: tell the handler (`JobContext.cancel_requested`)
        and cancel an async handler's coroutine. True the first time only."""
        with self._lock:
            if self._cancel_requested.requested:
                return False
            self._cancel_requested.requested = True
            cancel = self.cancel if self.state == self.RUNNING else None
        if cancel is not None:
            cancel()
        return True

    @property
    def cancel_flag(self) -> CancelFlag:
        """Set when someone asked to cancel the job: what `JobContext.cancel_requested` reads."""
        return self._cancel_requested

    @property
    def cancel_requested(self) -> bool:
        return self._cancel_requested.requested

    @property
    def settled(self) -> bool:
        return self.state == self.SETTLED
