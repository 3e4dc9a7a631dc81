"""The worker: claim what fits in free slots, run handlers outside any transaction, record
each outcome under its claim token, keep leases alive, and shut down gracefully.

Threads, each with one job:

* the **claim loop** (the thread that calls `run`; with `run_async` a thread of its own):
  claims at most as many jobs as there are free slots, hands them to the handler threads or
  the event loop, makes the periodic passes of lease recovery (`recovery.Recoverer`),
  pruning (`maintenance.Pruner`) and the per-minute sample (`sampling.Sampler`), and sleeps until a notification, a freed slot or the poll
  interval wakes it;
* **handler threads** (``concurrency`` of them, started with the first synchronous job): run a
  handler, then record its outcome;
* the **event loop** (`_handler_loop.HandlerLoop`: the worker's own, or the application's with
  `run_async`): runs ``async def`` handlers as asyncio tasks, as many at once as there are
  slots, none holding a thread; their failures are recorded by the **outcome thread**, so the
  loop never waits on the database;
* the **lease keeper** (`_lease_keeper.LeaseKeeper`): renews the leases of running jobs every
  ``lease / 3``, fences jobs whose lease could not be renewed in time (self-fencing: their
  outcome is never recorded), and enforces per-task timeouts;
* the **listener** (`_listener.Listener`): LISTENs for enqueue notifications on a connection
  of its own; when it is down, polling still finds the work.

The services decide; this module acts on what they report, and records outcomes and reports
lost claims only through `Queue`'s public methods.

Every database call has a client-side deadline (``call_timeout``), so a silent connection
never hangs a worker. Python cannot stop a running thread: a handler that outlives its timeout
or its fenced lease keeps its slot until it returns, but its result is discarded. A coroutine
can be stopped, and is: timeouts, fencing, lost claims and the end of the grace period cancel it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import queue as queue_module
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..db.engine import engine_of, worker_engine
from ..core.handler_transaction import HandlerSessions, HandlerTransaction
from .held_job import HeldJob
from ..services.lease_keeper import LeaseKeeper, LeaseKeeperConfig, LeaseKeeperResult
from ..services.listener import Listener, ListenerConfig
from .config import WorkerConfig, WorkerSummary
from .handler_loop import HandlerLoop
from .._tasks import Task
from ..errors import DatabaseError, JobCancelledError, Snooze, UnknownTaskError
from ..services.pruning import worker_pruner
from ..services.recovery import Recoverer, RecoveryConfig
from ..services.sampling import worker_sampler
from .job_run import (
    call_handler,
    calls_handlers,
    checked_result,
    checked_snooze,
    from_the_handler_on,
    record_outcome,
    settled_by_transaction,
)
from ..core.schedules import Scheduler
from ..types import ClaimedJob

if TYPE_CHECKING:
    from ..queue import Queue

logger = logging.getLogger("sqla_queue.worker")

_OUTCOME_BACKOFF = (0.05, 0.2, 0.5, 1.0, 2.0)
_ERROR_BACKOFF_MAX = 5.0
_RESTART_CLAIM_ORDER_EVERY = 1.0  # seconds between claims from the start of the claim order


class Worker:
    """Runs the handlers of one Queue. Build it with ``queue.worker(...)``."""

    def __init__(self, queue: Queue, **options: Any) -> None:
        self.config = WorkerConfig.build(**options)
        self.worker_id = self.config.worker_id or _default_worker_id()
        timeout = self.config.effective_call_timeout
        # Connections made like the application's (connect_args, do_connect, creator), plus the
        # worker's keepalives and deadlines; see `worker_engine`.
        self.engine = worker_engine(
            self.config.engine or queue.engine, pool_size=self.config.concurrency + 3, call_timeout=timeout,
            prepared_statements=self.config.prepared_statements,
        )
        self.queue = queue.on_engine(self.engine, call_timeout=timeout)
        # The listener connects like the rest, unless told where: directly to PostgreSQL while
        # the rest go through PgBouncer in transaction mode, which cannot deliver notifications.
        self._listen_engine = self.engine if self.config.listen_engine is None else worker_engine(
            engine_of(self.config.listen_engine), pool_size=1, call_timeout=timeout)
        self._listen_queue = self.queue if self._listen_engine is self.engine else queue.on_engine(
            self._listen_engine, call_timeout=timeout)
        self._pruner = worker_pruner(self.queue, self.config.pruning)
        self._recoverer = Recoverer(self.queue, RecoveryConfig(
            lease=self.config.lease, interval=self.config.recovery_interval))
        self._scheduler = Scheduler(self.queue)
        self._sampler = worker_sampler(self.queue, self.config.sample_interval, self.config.sample_retention)
        # Handler transactions open their sessions on the application's engine (the one given,
        # not the worker's autocommit connections) and its asyncio engine.
        self._sessions = HandlerSessions.of(queue)
        self._lease_keeper = LeaseKeeper(self.queue, LeaseKeeperConfig(lease=self.config.lease),
                                         self._snapshot, owner=f"worker {self.worker_id}")
        self.summary = WorkerSummary()
        self._held: dict[int, HeldJob] = {}
        self._held_lock = threading.Lock()
        self._work: deque[HeldJob] = deque()
        self._to_complete: list[HeldJob] = []
        self._completion_lock = threading.Lock()
        self._work_ready = threading.Condition()
        # Per queue: where the last claim got to in claim order, and when to start over.
        self._positions: dict[str, tuple[int, Any, int]] = {}
        self._restart_at: dict[str, float] = {}
        self._wake = threading.Event()
        self._outcomes: queue_module.SimpleQueue[Callable[[], None] | None] = queue_module.SimpleQueue()
        self._coroutines: set[asyncio.Task] = set()
        self._handler_loop = HandlerLoop.own()
        self._handler_threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._signals = 0

    # -- public -----------------------------------------------------------------------

    def run(self, *, until_empty: bool = False) -> WorkerSummary:
        """Work until stopped (SIGTERM/SIGINT or `stop`), or with `until_empty` until nothing
        is due and nothing is running. Then let running handlers finish within the grace
        period and release what is left. ``async def`` handlers run on an event loop of the
        worker's own."""
        return self._run(until_empty, HandlerLoop.own())

    async def run_async(self, *, until_empty: bool = False) -> WorkerSummary:
        """`run` inside the running event loop, which ``async def`` handlers then run on (an
        application's lifespan, say). Cancelling the task that awaits this stops the worker
        as SIGTERM would (running handlers get the grace period, the rest are released), then
        re-raises the cancellation; a second cancellation skips the grace period. The claim
        loop, lease keeper and listener keep their threads; the application's signals are its
        own."""
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[WorkerSummary] = loop.create_future()

        def work() -> None:
            try:
                summary = self._run(until_empty, HandlerLoop.borrow(loop))
            except BaseException as exc:
                loop.call_soon_threadsafe(_settle_future, finished, None, exc)
            else:
                loop.call_soon_threadsafe(_settle_future, finished, summary, None)

        threading.Thread(target=work, name="sqla-queue-claim", daemon=True).start()
        try:
            return await asyncio.shield(finished)
        except asyncio.CancelledError:
            self.stop()
            while not finished.done():
                try:
                    await asyncio.shield(finished)
                except asyncio.CancelledError:
                    self._hurry()
            raise

    def _run(self, until_empty: bool, handler_loop: HandlerLoop) -> WorkerSummary:
        self._stopping.clear()
        self._done.clear()
        self._handler_loop = handler_loop
        with self._signal_handlers(), self._threads():
            logger.info("worker %s serving %s with concurrency %s", self.worker_id,
                        ",".join(self.config.queues), self.config.concurrency)
            self._claim_loop(until_empty)
            self._drain()
        # A stopped worker holds no connection (the engine reconnects if it runs again); one a
        # thread left behind still uses is closed when that thread gives it back.
        self.engine.dispose()
        if self._listen_engine is not self.engine:
            self._listen_engine.dispose()
        logger.info("worker %s stopped: %s", self.worker_id, self.summary)
        return self.summary

    def stop(self) -> None:
        """Ask `run` to stop claiming and shut down gracefully (thread-safe)."""
        self._stopping.set()
        self._wake.set()

    def _hurry(self) -> None:
        """A second stop request: skip what is left of the grace period."""
        self._signals = max(self._signals, 2)
        self.stop()

    # -- claim loop -------------------------------------------------------------------

    def _claim_loop(self, until_empty: bool) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                self._recoverer.run_if_due()
                self._pruner.run_if_due()
                self._scheduler.run_if_due()
                self._sampler.run_if_due()
                # Sampled before the claim: a job that finishes during it may retry at once, so
                # "empty" only counts when nothing was held while the queue was looked at.
                idle_before = self._held_count() == 0
                claimed, from_start = self._complete_and_claim()
                failures = 0
            except DatabaseError as exc:
                failures += 1
                delay = min(_ERROR_BACKOFF_MAX, 0.1 * 2**failures)
                logger.warning("worker %s: database error, retrying in %.1fs: %s", self.worker_id, delay, exc)
                self._stopping.wait(delay)
                continue
            if until_empty and claimed == 0 and idle_before and from_start:
                return
            if claimed == 0 and not from_start:
                continue  # ran out from a position: look again from the start at once
            if (claimed == 0 or self._free_slots() == 0) and not self._finished_waiting():
                self._wake.wait(self._idle_wait())
                self._wake.clear()

    def _idle_wait(self) -> float:
        """The poll interval, or less when a schedule's next tick comes sooner."""
        due_in = self._scheduler.seconds_until_due()
        return self.config.poll_interval if due_in is None else max(0.0, min(self.config.poll_interval, due_in))

    def _complete_and_claim(self) -> tuple[int, bool]:
        """One statement per queue: complete what finished, claim into the free slots.

        Sharing the commit halves the commits per job (a commit waits for a WAL flush, the
        dominant cost of a no-op job). The finished jobs still count as held until then, so a
        claim never reserves more jobs than there are slots. Returns the jobs claimed and
        whether every claim started from the beginning of the claim order (only those can
        tell that nothing is due).
        """
        claimed, from_start = 0, True
        for queue_name in self._queue_order():
            finished = self._take_finished()
            free = self._free_slots() + len(finished)
            limit = 0 if self._stopping.is_set() else min(free, self.config.effective_batch_size)
            if not finished and limit <= 0:
                continue
            position = self._claim_from(queue_name) if limit else None
            try:
                results, jobs = self.queue.complete_and_claim(
                    [h.job for h in finished], queue_name, worker_id=self.worker_id, limit=limit,
                    from_position=position, results=_results_of(finished),
                )
            except DatabaseError:
                self._return_finished(finished)
                raise
            self._settle_completed(finished, results)
            self._hold(jobs)
            if limit:
                self._note_position(queue_name, jobs, limit)
            claimed += len(jobs)
            from_start = from_start and position is None
        self.summary.claimed += claimed
        return claimed, from_start

    def _claim_from(self, queue_name: str) -> tuple[int, Any, int] | None:
        """Where to start this queue's claim: after the last claim's position while working
        through a backlog (the dead index entries behind it are skipped), from the start of
        the claim order every `_RESTART_CLAIM_ORDER_EVERY` seconds, so a job that became due
        behind the position (enqueued with a past ``run_at``, or skipped while another claim
        held it) waits at most that long."""
        now = time.monotonic()
        if now >= self._restart_at.get(queue_name, 0.0):
            self._restart_at[queue_name] = now + _RESTART_CLAIM_ORDER_EVERY
            return None
        return self._positions.get(queue_name)

    def _note_position(self, queue_name: str, jobs: list[ClaimedJob], limit: int) -> None:
        if len(jobs) < limit:  # ran out of due jobs from here: start over next time
            self._positions.pop(queue_name, None)
        else:
            position = claim_position(jobs)
            if position is not None:
                self._positions[queue_name] = position

    def _take_finished(self) -> list[HeldJob]:
        with self._completion_lock:
            finished, self._to_complete = self._to_complete, []
        return [h for h in finished if h.state == HeldJob.COMPLETING]

    def _return_finished(self, finished: list[HeldJob]) -> None:
        """A failed transaction completed nothing: try again next round (leases are renewed
        meanwhile; past the lease, fencing gives them up)."""
        with self._completion_lock:
            self._to_complete[:0] = finished

    def _finished_waiting(self) -> bool:
        with self._completion_lock:
            return bool(self._to_complete)

    def _settle_completed(self, finished: list[HeldJob], results: dict[int, bool]) -> None:
        settled = [h for h in finished if h.move(HeldJob.SETTLED, allowed=(HeldJob.COMPLETING,))]
        completed = sum(1 for h in settled if results.get(h.job.id))
        with self._held_lock:
            self.summary.completed += completed
            self.summary.lost += len(settled) - completed
        self._forget(*finished)

    def _queue_order(self) -> list[str]:
        """Rotate the starting queue each round so one busy queue cannot starve the others."""
        queues = list(self.config.queues)
        shift = self.summary.claimed % len(queues)
        return queues[shift:] + queues[:shift]

    def _hold(self, jobs: Sequence[ClaimedJob]) -> None:
        if not jobs:
            return
        tasks = {name: self._task_of(name) for name in {job.task for job in jobs}}
        held = [HeldJob(job, None if tasks[job.task] is None else tasks[job.task].timeout, self._transaction_for)
                for job in jobs]
        with self._held_lock:
            self._held.update((h.job.id, h) for h in held)
        awaited = {name: task is not None and task.is_async for name, task in tasks.items()}
        coroutines = [h for h in held if awaited[h.job.task]]
        threaded = [h for h in held if not awaited[h.job.task]]
        if coroutines:
            self._handler_loop.call_soon(self._start_coroutines, coroutines)
        if threaded:
            self._start_handler_threads()
            with self._work_ready:
                self._work.extend(threaded)
                self._work_ready.notify(len(threaded))

    def _transaction_for(self, held: HeldJob) -> HandlerTransaction:
        return self.queue.handler_transaction(held.job, held.cancel_event, self._sessions,
                                              on_settled=functools.partial(self._settled_in_transaction, held))

    def _settled_in_transaction(self, held: HeldJob, outcome: str) -> bool:
        """Its ``ctx.transaction()`` completed the job (or found the claim lost): settled now,
        so the lease keeper neither renews it nor times it out, nor cancels its handler while
        that runs on after the block. The slot stays taken until the handler returns. False:
        the worker had given the job up already (and reported that)."""
        if not held.move(HeldJob.SETTLED):
            return False
        self._count(outcome)
        return True

    def _task_of(self, task_name: str) -> Task | None:
        try:
            return self.queue.get_task(task_name)
        except UnknownTaskError:  # its handler thread records that as the job's failure
            return None

    # -- handler threads --------------------------------------------------------------

    def _start_handler_threads(self) -> None:
        """The ``concurrency`` handler threads, started with the first synchronous job: a
        worker whose jobs are all ``async def`` has none."""
        if self._handler_threads:
            return
        self._handler_threads = [
            threading.Thread(target=self._handler_thread, name=f"sqla-queue-handler-{i}", daemon=True)
            for i in range(self.config.concurrency)
        ]
        for thread in self._handler_threads:
            thread.start()

    def _handler_thread(self) -> None:
        while True:
            with self._work_ready:
                while not self._work and not self._done.is_set():
                    self._work_ready.wait()
                if not self._work:
                    return
                held = self._work.popleft()
            if self._stopping.is_set() or held.state != HeldJob.RUNNING:
                continue  # shutting down: not started, so it is released, not run
            held.started = True
            completing = False
            try:
                completing = self._execute(held)
            finally:
                if not completing:
                    self._forget(held)

    def _forget(self, *held: HeldJob) -> None:
        """The jobs' outcomes are recorded (or given up): free their slots, and wake the claim
        loop if a slot was freed. Only then: a round that settled nothing must not wake it, or
        an idle worker claims in a tight loop instead of resting for the poll interval."""
        with self._held_lock:
            freed = [h for h in held if self._held.pop(h.job.id, None) is not None]
        if freed:
            self._wake.set()

    def _execute(self, held: HeldJob) -> bool:
        """Run the handler and settle the job; True when its completion was handed to the
        claim loop (the job keeps its slot until that commits)."""
        if held.cancel_requested:
            error: BaseException | None = _cancelled_before_start()
        else:  # checked here, in the handler's thread, so the claim loop never pays for a bad result
            held.result, error = call_handler(self.queue, held.job, held.context, self._handler_loop.wait_for)
        settled = self._settle_handler(held, error)
        if settled == "record":
            self._record(held, error)
        return settled == "completing"

    def _settle_handler(self, held: HeldJob, error: BaseException | None) -> str:
        """What the handler's end means for its job: ``"completing"`` (handed to the claim
        loop's next transaction), ``"record"`` (a failure whose outcome the caller records), or
        ``"done"`` (its ``ctx.transaction()`` settled it, or it timed out, was fenced or lost
        meanwhile: that path decided the outcome)."""
        if settled_by_transaction(held.transaction, held.job, held.result, error) is not None:
            return "done"  # counted when the block settled it (`_settled_in_transaction`)
        if error is not None:
            return "record" if held.move(HeldJob.SETTLED) else "done"
        if not held.move(HeldJob.COMPLETING):
            return "done"
        with self._completion_lock:
            self._to_complete.append(held)
        self._wake.set()
        return "completing"

    # -- async handlers (on `_handler_loop`) -------------------------------------------

    def _start_coroutines(self, held: list[HeldJob]) -> None:
        """On the loop: start each claimed job's handler as an asyncio task. A job the worker
        stopped for, or gave up meanwhile, is not started (shutdown releases it)."""
        loop = asyncio.get_running_loop()
        for h in held:
            if self._stopping.is_set() or h.state != HeldJob.RUNNING:
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
        job = held.job
        if held.state != HeldJob.RUNNING:  # given up before `held.cancel` could reach this task
            self._forget(held)
            return
        error: BaseException | None = _cancelled_before_start() if held.cancel_requested else None
        try:
            if error is None:
                task = self.queue.get_task(job.task)
                if held.timeout is None:
                    result = await task.handler(job.payload, held.context)
                else:
                    async with asyncio.timeout(held.timeout.total_seconds()):
                        result = await task.handler(job.payload, held.context)
                held.result, error = checked_result(self.queue, task, result)
        except asyncio.CancelledError:
            if not (held.cancel_requested and held.state == HeldJob.RUNNING):
                self._cancelled(held)
                raise
            asyncio.current_task().uncancel()  # a cancel request: the job's outcome, not ours to stop
            error = JobCancelledError("cancelled on request while its handler ran")
        except TimeoutError as exc:
            error = exc if held.timeout is None else _timed_out(held)
        except Snooze as snooze:
            error = checked_snooze(snooze)
        except Exception as exc:  # a handler's failure is data: it decides retry or fail
            error = from_the_handler_on(exc)
        settled = self._settle_handler(held, error)
        if settled == "record":
            self._outcomes.put(functools.partial(self._record_and_forget, held, error))
        elif settled == "done":
            self._forget(held)

    def _cancelled(self, held: HeldJob) -> None:
        """Whoever cancelled the coroutine (timeout, fence, lost claim, shutdown) settled its
        job first; one cancelled by anything else (the application's loop shutting down) is
        given back, its attempt not counted."""
        if held.move(HeldJob.SETTLED):
            self._outcomes.put(functools.partial(self._release_and_forget, held))
        else:
            self._forget(held)

    def _record_and_forget(self, held: HeldJob, error: BaseException) -> None:
        try:
            self._record(held, error)
        finally:
            self._forget(held)

    def _release_and_forget(self, held: HeldJob) -> None:
        try:
            self._release([held])
        finally:
            self._forget(held)

    def _cancel(self, held: HeldJob) -> None:
        """Cancel a given-up job's coroutine (a thread cannot be stopped: its result is ignored)."""
        if held.cancel is not None:
            held.cancel()

    def _outcome_thread(self) -> None:
        """Records async handlers' failures (database I/O with retries, kept off the loop)."""
        while True:
            work = self._outcomes.get()
            if work is None:
                return
            try:
                work()
            except Exception:  # one failed record must not stop the ones after it
                logger.exception("worker %s: recording an async handler's outcome failed", self.worker_id)

    def _record(self, held: HeldJob, error: BaseException | None) -> None:
        """Record the outcome, retrying through database errors while the lease still holds.

        Outcomes are safe to replay (a lost reply followed by a retry reports the same result),
        so retrying after an error whose commit status is unknown is correct.
        """
        for attempt in range(1000):
            try:
                self._record_once(held, error)
                return
            except DatabaseError as exc:
                if time.monotonic() - held.lease_confirmed >= self.config.lease_seconds:
                    self._report_fenced(held, "lease expired while the outcome could not be recorded")
                    return
                delay = _OUTCOME_BACKOFF[min(attempt, len(_OUTCOME_BACKOFF) - 1)]
                logger.warning("job %s: could not record outcome (%s), retrying in %.2fs", held.job.id, exc, delay)
                time.sleep(delay)

    def _record_once(self, held: HeldJob, error: BaseException | None) -> None:
        self._count(record_outcome(self.queue, held.job, held.result, error))

    def _count(self, name: str) -> None:
        with self._held_lock:
            setattr(self.summary, name, getattr(self.summary, name) + 1)

    # -- lease keeper ---------------------------------------------------------------

    def _keep_leases(self) -> None:
        self._lease_keeper.run(self._done, self._act_on_leases)

    def _act_on_leases(self, result: LeaseKeeperResult) -> None:
        """Record what the lease keeper gave up: timed-out handlers fail their attempt, fenced
        jobs are reported, lost ones (already reported by the heartbeat) counted."""
        for held in result.timed_out:
            self._cancel(held)
            self._record(held, _timed_out(held))
        for held in result.fenced:
            self._cancel(held)
            self._report_fenced(held, "lease could not be renewed before it expired")
        for held in result.lost:
            self._cancel(held)
            self._count("lost")
        for held in result.cancel_requested:
            logger.info("job %s: cancel requested; its handler was told", held.job.id)

    def _report_fenced(self, held: HeldJob, reason: str) -> None:
        self._count("lost")
        self.queue.report_fenced(held.job, reason)

    # -- shutdown ---------------------------------------------------------------------

    def _drain(self) -> None:
        """Stop claiming; keep completing while running handlers get the grace period; then
        release what is left (started or not) and complete the last finished jobs."""
        deadline = time.monotonic() + self.config.shutdown_grace
        while self._signals < 2:
            self._complete_finished()
            if not self._running_count() or time.monotonic() >= deadline:
                break
            self._wake.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            self._wake.clear()
        leftover = [h for h in self._snapshot() if h.move(HeldJob.SETTLED)]
        for held in leftover:
            self._cancel(held)
        self._release(leftover)
        self._complete_finished()

    def _complete_finished(self) -> None:
        finished = self._take_finished()
        if not finished:
            return
        try:
            results = self.queue.complete_many([h.job for h in finished], results=_results_of(finished))
        except DatabaseError as exc:
            logger.error("worker %s: could not complete %d finished job(s); they return when "
                         "their lease expires: %s", self.worker_id, len(finished), exc)
            results = {}
        self._settle_completed(finished, results)

    def _release(self, leftover: list[HeldJob]) -> None:
        if not leftover:
            return
        try:
            released = self.queue.release(h.job for h in leftover)
        except DatabaseError as exc:
            logger.error("worker %s: could not release %d job(s); they return when their "
                         "lease expires: %s", self.worker_id, len(leftover), exc)
            return
        self.summary.released += len(released)
        logger.warning("worker %s released %d unfinished job(s): %s", self.worker_id,
                       len(released), ", ".join(map(str, released)))

    @contextmanager
    def _signal_handlers(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        for sig in previous:
            signal.signal(sig, self._on_signal)
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signals += 1
        if self._signals == 1:
            logger.warning("worker %s: %s received, finishing running jobs (grace %ss); "
                           "send it again to exit at once", self.worker_id,
                           signal.Signals(signum).name, self.config.shutdown_grace)
            self.stop()
            return
        logger.error("worker %s: second signal, exiting now; held jobs return when their "
                     "lease expires", self.worker_id)
        os._exit(128 + signum)

    # -- plumbing ---------------------------------------------------------------------

    @contextmanager
    def _threads(self) -> Iterator[None]:
        self._handler_threads = []
        threads = [threading.Thread(target=self._keep_leases, name="sqla-queue-lease", daemon=True)]
        threads.append(threading.Thread(target=self._outcome_thread, name="sqla-queue-outcomes", daemon=True))
        self._listener = Listener(
            self._listen_queue,
            ListenerConfig(queues=tuple(self.config.queues), call_timeout=self.config.effective_call_timeout),
            self._wake, self._done,
        ) if self.config.listen else None
        if self._listener is not None:
            threads.append(threading.Thread(target=self._listener.run, name="sqla-queue-listen", daemon=True))
        for thread in threads:
            thread.start()
        try:
            yield
        finally:
            self._done.set()
            self._outcomes.put(None)
            with self._work_ready:
                self._work_ready.notify_all()
            # Idle handler threads exit at once. One still running a job that was just released
            # is abandoned (daemon threads die with the process): every second spent waiting
            # for it is a second in which that job may also run on another worker.
            join_until = time.monotonic() + (0 if self._signals >= 2 else 1)
            for thread in threads + self._handler_threads:
                thread.join(timeout=max(0.0, join_until - time.monotonic()))
            self._handler_loop.close(timeout=max(0.0, join_until - time.monotonic()))

    def _listener_connected(self) -> bool:
        """True while LISTEN is active (tests wait on it before measuring wake-ups)."""
        listener = getattr(self, "_listener", None)
        return listener is not None and listener.connected.is_set()

    def _snapshot(self) -> list[HeldJob]:
        with self._held_lock:
            return list(self._held.values())

    def _running_count(self) -> int:
        return sum(1 for h in self._snapshot() if h.started and h.state == HeldJob.RUNNING)

    def _held_count(self) -> int:
        with self._held_lock:
            return len(self._held)

    def _free_slots(self) -> int:
        return self.config.concurrency - self._held_count()


def _results_of(finished: Sequence[HeldJob]) -> dict[int, Any] | None:
    results = {h.job.id: h.result for h in finished if h.result is not None}
    return results or None


def _cancelled_before_start() -> JobCancelledError:
    return JobCancelledError("cancelled on request before its handler started")


def _timed_out(held: HeldJob) -> TimeoutError:
    timeout = held.timeout.total_seconds() if held.timeout is not None else 0.0
    return TimeoutError(f"handler exceeded its timeout of {timeout:g}s")


def _settle_future(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


def _default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


def claim_position(jobs: Sequence[ClaimedJob]) -> tuple[int, datetime, int] | None:
    """Where a claim that returned `jobs` got to in claim order: the earliest of them within
    the lowest priority it reached, as ``(priority, run_at, id)``.

    The claim read the pending index in order, so every due job ranked above that priority was
    claimed or skipped (locked) by some claim, and so was every job of that priority before the
    earliest one claimed: the next claim can start there (`Queue.complete_and_claim`'s
    ``from_position``), within that priority."""
    lowest = min((job.priority for job in jobs if job.run_at is not None), default=None)
    if lowest is None:
        return None
    return min((lowest, job.run_at, job.id) for job in jobs if job.priority == lowest and job.run_at is not None)
