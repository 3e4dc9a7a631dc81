"""The worker's runs of its held jobs: handler threads for synchronous handlers, asyncio tasks
on the worker's `HandlerLoop` for ``async def`` ones, one ladder for both (`job_run.JobRuns`),
the hand-over of completions to the claim loop, and the outcome thread.

Python cannot stop a running thread: a handler that outlives its timeout or its fenced lease
keeps its slot until it returns, but its result is discarded. A coroutine can be stopped, and
is: timeouts, fencing, lost claims and the end of the grace period cancel it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue as queue_module
import threading
import time
from collections.abc import Callable
from typing import Any

from ..core import Core
from ..core.handler_transaction import HandlerSessions, HandlerTransaction
from ..errors import DatabaseError, JobCancelledError, PermissionDeniedError
from ..types import ClaimedJob
from .handler_threads import HandlerThreads
from .held_job import HeldJob
from .job_run import JobRuns, calls_handlers, ending_of, settled_by_transaction
from .slots import Slots

logger = logging.getLogger("sqla_queue.worker")

_OUTCOME_BACKOFF = (0.05, 0.2, 0.5, 1.0, 2.0)

COMPLETING, RECORD, DONE = "completing", "record", "done"
"""What a handler's end means for its held job: handed to the claim loop's next transaction,
a failure for the runner to record, or settled by another path (its ``ctx.transaction()``, a
timeout, a fence, a lost claim)."""


class WorkerRuns(JobRuns):
    """Runs a worker's held jobs (``ctx.transaction()`` opening its sessions on `sessions`, the
    application's engines): synchronous handlers on up to `concurrency` threads (started as
    jobs arrive: `HandlerThreads`), ``async def`` ones as tasks on the worker's `HandlerLoop`, whose
    failures the outcome thread records so the loop never waits on the database."""

    def __init__(self, core: Core, slots: Slots, sessions: HandlerSessions, *, concurrency: int,
                 lease_seconds: float, worker_id: str, stopping: threading.Event,
                 halt: Callable[[PermissionDeniedError], None]) -> None:
        super().__init__(core)
        self.slots = slots
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.worker_id = worker_id
        self.stopping = stopping
        self.halt = halt
        self.handler_loop: Any = None  # set by the worker for each run
        self.sessions = sessions
        # This run's handler threads and their queue (`HandlerThreads`), made with its first
        # synchronous job.
        self._handlers: HandlerThreads | None = None
        # Per handler thread: its run's queue (``work``) and the job it runs next (``next``).
        self._mine = threading.local()
        self._outcomes: queue_module.SimpleQueue[Callable[[], None] | None] = queue_module.SimpleQueue()
        self._coroutines: set[asyncio.Task] = set()

    # -- holding and dispatching ----------------------------------------------------------

    def held(self, job: ClaimedJob) -> HeldJob:
        """A claimed job as this worker holds it (its task's timeout and kind)."""
        return HeldJob(job, self.task_of(job), self._transaction_for, self.core.workflow_reads)

    def dispatch(self, held: list[HeldJob]) -> None:
        """Start the held jobs' handlers: async ones on the loop, the others on the threads."""
        coroutines = [h for h in held if h.is_async]
        threaded = [h for h in held if not h.is_async]
        if coroutines:
            self.handler_loop.call_soon(self._start_coroutines, coroutines)
        if threaded:
            handlers = self._handlers or self._start_handlers()
            work, mine = handlers.work, self._mine
            if getattr(mine, "work", None) is work and mine.next is None:
                # A handler thread of this run freed its slot: it runs the first job itself,
                # next, instead of waking another thread for it (a wake-up per job costs more
                # than a no-op handler).
                mine.next, threaded = threaded[0], threaded[1:]
            put = work.put
            for h in threaded:
                put(h)
            if handlers.more_wanted():
                handlers.grow()

    def _transaction_for(self, held: HeldJob) -> HandlerTransaction:
        return self.core.handler_transaction(held.job, held.cancel_flag, self.sessions,
                                             on_settled=functools.partial(self._settled_in_transaction, held))

    def _settled_in_transaction(self, held: HeldJob, outcome: str) -> bool:
        """Its ``ctx.transaction()`` completed the job (or found the claim lost): settled now,
        so the lease keeper neither renews it nor times it out, nor cancels its handler while
        that runs on after the block. The slot stays taken until the handler returns. False:
        the worker had given the job up already (and reported that)."""
        if not held.give_up():
            return False
        self.slots.count(outcome)
        return True

    # -- handler threads --------------------------------------------------------------------

    def _start_handlers(self) -> HandlerThreads:
        """This run's handler threads, made with its first synchronous job: a worker whose jobs
        are all ``async def`` has none. A queue of their own: a thread abandoned by an earlier
        run (stuck in a handler) that comes back later finds its own run's end, never this
        run's jobs or stop signals."""
        self._handlers = HandlerThreads(self.concurrency, self._handler_thread)
        return self._handlers

    def _handler_thread(self, handlers: HandlerThreads, index: int) -> None:
        work = handlers.work
        get = work.get
        mine = self._mine
        mine.work, mine.next = work, None
        while True:
            held = mine.next
            if held is None:
                held = get()
                if held is None:  # the run ended (`wake_threads`)
                    return
            else:
                mine.next = None
            # Busy from here: waiting for its rate's token holds this thread as a handler does, so
            # jobs waiting behind it and no thread free start one more (`HandlerThreads.enter`).
            handlers.enter(index)
            try:
                wait = held.start_at - time.monotonic()
                if wait > 0:  # its rate's token is not due yet (`ClaimedJob.start_after`)
                    self.stopping.wait(wait)
                if self.stopping.is_set() or not held.running:
                    continue  # shutting down: not started, so it is released, not run
                held.started = True
                completing = False
                try:
                    completing = self._run_here(held)
                finally:
                    if not completing:
                        self.slots.forget(held)
            finally:
                handlers.leave(index)

    def _run_here(self, held: HeldJob) -> bool:
        """Run the handler and settle the job; True when its completion was handed to the
        claim loop (the job keeps its slot until that commits)."""
        if held.cancel_requested:
            error: BaseException | None = cancelled_before_start()
        else:  # checked here, in the handler's thread, so the claim loop never pays for a bad result
            held.result, error = self.call_here(held.job, held.handler_context(), self.handler_loop.wait_for,
                                                held.task)
        ending = self.settle(held, error)
        if ending == RECORD:
            self.record_held(held, error)
        return ending == COMPLETING

    def settle(self, held: HeldJob, error: BaseException | None) -> str:
        """What the handler's end means for its job (`COMPLETING`, `RECORD` or `DONE`)."""
        if settled_by_transaction(held.transaction, held.job, held.result, error) is not None:
            return DONE  # counted when the block settled it (`_settled_in_transaction`)
        if error is not None:
            return RECORD if held.give_up() else DONE
        if not held.move(HeldJob.COMPLETING):
            return DONE
        self.slots.finished(held)
        return COMPLETING

    # -- async handlers (on the handler loop) -----------------------------------------------

    def _start_coroutines(self, held: list[HeldJob]) -> None:
        """On the loop: start each claimed job's handler as an asyncio task. A job the worker
        stopped for, or gave up meanwhile, is not started (shutdown releases it)."""
        loop = asyncio.get_running_loop()
        for h in held:
            if self.stopping.is_set() or not h.running:
                continue
            h.started = True
            task = loop.create_task(self._run_coroutine(h), name=f"sqla-queue-job-{h.job.id}")
            self._coroutines.add(task)
            task.add_done_callback(self._coroutines.discard)
            h.cancel = functools.partial(loop.call_soon_threadsafe, task.cancel)

    @calls_handlers
    async def _run_coroutine(self, held: HeldJob) -> None:
        """An async handler's run: awaited under its task's timeout (which cancels it), then
        settled like a thread's. Failures are recorded on the outcome thread, never on the loop."""
        if not held.running:  # given up before `held.cancel` could reach this task
            self.slots.forget(held)
            return
        error: BaseException | None = cancelled_before_start() if held.cancel_requested else None
        try:
            if error is None:
                wait = held.start_at - time.monotonic()
                if wait > 0:  # its rate's token is not due yet (`ClaimedJob.start_after`)
                    await asyncio.sleep(wait)
                held.result, error = await self._awaited(held)
        except asyncio.CancelledError as exc:
            current = asyncio.current_task()
            if current is not None and current.cancelling() == 0:
                error = ending_of(exc)  # the handler's own CancelledError: its failure, counted
            elif not (held.cancel_requested and held.running):
                self._cancelled(held)
                raise
            else:
                current.uncancel()  # a cancel request: the job's outcome, not ours to stop
                error = JobCancelledError("cancelled on request while its handler ran")
        except TimeoutError as exc:
            error = ending_of(exc) if held.timeout is None else timed_out(held)
        except BaseException as exc:  # a handler's failure is data, whatever it raised
            error = ending_of(exc)
        ending = self.settle(held, error)
        if ending == RECORD:
            self._outcomes.put(functools.partial(self._record_and_forget, held, error))
        elif ending == DONE:
            self.slots.forget(held)

    async def _awaited(self, held: HeldJob) -> tuple[Any, BaseException | None]:
        task, value = self.call(held.job, held.handler_context(), held.task)
        if held.timeout is None:
            return self.checked(task, await value)
        async with asyncio.timeout(held.timeout.total_seconds()):
            value = await value
        return self.checked(task, value)

    def _cancelled(self, held: HeldJob) -> None:
        """Whoever cancelled the coroutine (timeout, fence, lost claim, shutdown) settled its
        job first; one cancelled by anything else (the application's loop shutting down) is
        given back, its attempt not counted."""
        if held.give_up():
            self._outcomes.put(functools.partial(self._release_and_forget, held))
        else:
            self.slots.forget(held)

    def _record_and_forget(self, held: HeldJob, error: BaseException) -> None:
        try:
            self.record_held(held, error)
        finally:
            self.slots.forget(held)

    def _release_and_forget(self, held: HeldJob) -> None:
        try:
            self.release([held])
        finally:
            self.slots.forget(held)

    def outcome_thread(self) -> None:
        """Records async handlers' failures (database I/O with retries, kept off the loop)."""
        while True:
            work = self._outcomes.get()
            if work is None:
                return
            try:
                work()
            except Exception:  # one failed record must not stop the ones after it
                logger.exception("worker %s: recording an async handler's outcome failed", self.worker_id)

    # -- outcomes ---------------------------------------------------------------------------

    def record_held(self, held: HeldJob, error: BaseException | None) -> None:
        """Record the outcome, retrying through database errors while the lease still holds.

        Outcomes are safe to replay (a lost reply followed by a retry reports the same result),
        so retrying after an error whose commit status is unknown is correct. A refusal for lack
        of a privilege is not retried: it stops the worker (`halt`), and the job comes back when
        its lease expires.
        """
        for attempt in range(1000):
            try:
                self.slots.count(self.record(held.job, held.result, error))
                return
            except PermissionDeniedError as exc:
                logger.error("job %s: could not record its outcome; it returns when its lease expires: %s",
                             held.job.id, exc)
                self.halt(exc)
                return
            except DatabaseError as exc:
                if time.monotonic() - held.lease_confirmed >= self.lease_seconds:
                    self.report_fenced(held, "lease expired while the outcome could not be recorded")
                    return
                delay = _OUTCOME_BACKOFF[min(attempt, len(_OUTCOME_BACKOFF) - 1)]
                logger.warning("job %s: could not record outcome (%s), retrying in %.2fs", held.job.id, exc, delay)
                time.sleep(delay)

    def report_fenced(self, held: HeldJob, reason: str) -> None:
        self.slots.count("lost")
        self.core.outcomes.report_fenced(held.job, reason)

    def release(self, leftover: list[HeldJob]) -> None:
        """Give unfinished jobs back (pending now, the interrupted attempt not counted)."""
        if not leftover:
            return
        try:
            released = self.core.outcomes.release(h.job for h in leftover)
        except DatabaseError as exc:
            logger.error("worker %s: could not release %d job(s); they return when their "
                         "lease expires: %s", self.worker_id, len(leftover), exc)
            return
        self.slots.count("released", len(released))
        logger.warning("worker %s released %d unfinished job(s): %s", self.worker_id,
                       len(released), ", ".join(map(str, released)))

    @staticmethod
    def cancel(held: HeldJob) -> None:
        """Cancel a given-up job's coroutine (a thread cannot be stopped: its result is ignored)."""
        if held.cancel is not None:
            held.cancel()

    # -- shutdown ---------------------------------------------------------------------------

    def wake_threads(self) -> None:
        """End the handler threads (each after the jobs handed over before: a stop signal
        apiece, behind them in the queue) and the outcome thread."""
        self._outcomes.put(None)
        if self._handlers is not None:
            self._handlers.end()

    @property
    def threads(self) -> list[threading.Thread]:
        return [] if self._handlers is None else self._handlers.started()

    def threads_stalled(self) -> bool:
        """Jobs wait while every handler thread is inside a handler (`HandlerThreads`)."""
        return self._handlers is not None and self._handlers.stalled()

    def grow_stalled_threads(self) -> None:
        if self._handlers is not None:
            self._handlers.grow_stalled()

    def forget_threads(self) -> None:
        self._handlers = None


def cancelled_before_start() -> JobCancelledError:
    return JobCancelledError("cancelled on request before its handler started")


def timed_out(held: HeldJob) -> TimeoutError:
    timeout = held.timeout.total_seconds() if held.timeout is not None else 0.0
    return TimeoutError(f"handler exceeded its timeout of {timeout:g}s")
