"""The worker: claim what fits in free slots, run handlers outside any transaction, record
each outcome under its claim token, keep leases alive, and shut down gracefully.

This module is the worker's lifecycle: it builds the parts from a `Core`, starts the threads,
handles signals and drains at the end. The parts, each with one job:

* the **claim loop** (`claim_loop.ClaimLoop`, on the thread that calls `run`; with
  `run_async` a thread of its own): rounds that complete finished jobs and claim into free
  slots, the periodic services between them (`services.recovery`, `services.pruning`,
  `services.scheduler`, `services.sampling`, run by a `services.Looper`);
* the **slots** (`slots.Slots`): the held jobs, the prefetch buffer that hands them to handlers
  as handlers free up, and the finished ones waiting for the next round;
* the **job runs** (`runs.WorkerRuns`, over `job_run.JobRuns`): ``concurrency`` handler threads
  for synchronous handlers, asyncio tasks on the event loop (`handler_loop.HandlerLoop`: the
  worker's own, or the application's with `run_async`) for ``async def`` ones, and the outcome
  thread that records async failures off the loop;
* the **lease keeper** (`services.lease_keeper`, a looper thread): renews the leases of running
  jobs every ``lease / 3``, fences jobs whose lease could not be renewed in time (self-fencing:
  their outcome is never recorded) and enforces per-task timeouts;
* the **listener** (`services.listener`, a looper thread): LISTENs for enqueue notifications on
  a connection of its own; when it is down, polling still finds the work.

Every database call has a client-side deadline (``call_timeout``), so a silent connection never
hangs a worker. A statement the database refuses for lack of a privilege (SQLSTATE 42501), in
any of these parts, stops the worker: it drains like a stopped worker and `run` raises the
`PermissionDeniedError` (retrying cannot grant the privilege; docs/how-to/database-roles.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from ..core import Core
from ..db.engine import engine_of
from ..db.worker_engine import worker_engine
from ..errors import ConfigurationError, PermissionDeniedError
from ..services import Looper
from ..services.archiving import Archiver
from ..services.lease_keeper import LeaseKeeper, LeaseKeeperConfig, LeaseKeeperResult
from ..services.listener import Listener, ListenerConfig
from ..services.pruning import Pruner
from ..services.recovery import Recoverer, RecoveryConfig
from ..services.registry import WorkerDescription, WorkerRegistration
from ..services.sampling import Sampler
from ..services.scheduler import Scheduler
from ..sql.claim import DEFAULT_ORDER
from ..types import ClaimedJob
from .claim_loop import ClaimLoop
from .config import WorkerConfig, WorkerSummary
from .handler_loop import HandlerLoop
from .held_job import HeldJob
from .progress import Progress
from .runs import WorkerRuns, timed_out
from .slots import Nudger, Slots

logger = logging.getLogger("sqla_queue.worker")


class Worker:
    """Runs the handlers of one queue's tasks. Build it with ``queue.worker(...)``."""

    def __init__(self, core: Core, **options: Any) -> None:
        self.config = WorkerConfig.build(**options)
        self.worker_id = self.config.worker_id or _default_worker_id()
        timeout = self.config.effective_call_timeout
        # Connections made like the application's (connect_args, do_connect, creator), plus the
        # worker's keepalives and deadlines; see `worker_engine`.
        self.engine = worker_engine(
            self.config.engine or core.engine, pool_size=self.config.concurrency + 3, call_timeout=timeout,
            prepared_statements=self.config.prepared_statements,
        )
        self.core = core.on_engine(self.engine, call_timeout=timeout)
        # The listener connects like the rest, unless told where: directly to PostgreSQL while
        # the rest go through PgBouncer in transaction mode, which cannot deliver notifications.
        self._listen_engine = self.engine if self.config.listen_engine is None else worker_engine(
            engine_of(self.config.listen_engine), pool_size=1, call_timeout=timeout)
        self._listen_core = self.core if self._listen_engine is self.engine else core.on_engine(
            self._listen_engine, call_timeout=timeout)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._signals = 0
        self._denied: PermissionDeniedError | None = None
        self._denied_lock = threading.Lock()
        self.slots = Slots(self.config.concurrency, self._wake, prefetch=self.config.prefetch,
                           stopping=self._stopping)
        # Handler transactions open their sessions on the application's engine (the one given,
        # not the worker's autocommit connections) and its asyncio engine.
        self.runs = WorkerRuns(self.core, self.slots, core.handler_sessions(), concurrency=self.config.concurrency,
                               lease_seconds=self.config.lease_seconds, worker_id=self.worker_id,
                               stopping=self._stopping, halt=self._halt)
        self.slots.dispatch = self.runs.dispatch
        self._scheduler = Scheduler(self.core)
        self.claim_loop = ClaimLoop(self.core, self.config, self.worker_id, self.slots, self.runs,
                                    self._periodic_services(), self._scheduler,
                                    wake=self._wake, stopping=self._stopping)
        # Its row in the worker registry: inserted once the first rounds are done, refreshed on
        # the lease keeper's beat, deleted on a clean exit.
        self.registration = WorkerRegistration(self.core, WorkerDescription.of_this_process(
            self.worker_id, self.config.queues or (), core.tasks.names(), self.config.concurrency, self.config.lease,
        ), stopping=self._stopping)
        self._lease_keeper = LeaseKeeper(self.core, LeaseKeeperConfig(lease=self.config.lease),
                                         self.slots.snapshot, owner=f"worker {self.worker_id}",
                                         heartbeat=self.registration.beat)
        self._archiver = Archiver(self.core)
        self._listener: Listener | None = None
        self.queues: tuple[str, ...] = self.config.queues or ()
        """The queues this worker serves: `config.queues`, or settled when it runs."""

    def _periodic_services(self) -> Looper:
        """What the claim loop runs between rounds: recovery, pruning (if configured), the
        scheduler, the per-minute sample (unless turned off) and the progress line."""
        config = self.config
        services: list[Any] = [Recoverer(self.core, RecoveryConfig(lease=config.lease, interval=config.recovery_interval))]
        if config.pruning is not None:
            services.append(Pruner(self.core, config.pruning))
        services.append(self._scheduler)
        if config.sample_interval is not None:
            services.append(Sampler(self.core, retention=config.sample_retention, interval=config.sample_interval))
        services.append(Progress(self.worker_id, self.slots.tally))
        return Looper(services)

    @property
    def summary(self) -> WorkerSummary:
        return self.slots.summary

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
        self._denied = None
        self.runs.handler_loop = handler_loop
        self._serve()
        with self._signal_handlers(), self._threads():
            logger.info("worker %s serving %s%s with concurrency %s", self.worker_id, ",".join(self.queues),
                        " (every queue with a registered task)" if self.config.queues is None else "",
                        self.config.concurrency)
            try:
                self.claim_loop.run(until_empty)
            except PermissionDeniedError as exc:
                self._halt(exc)
            self._drain()
        self.registration.remove()
        # A stopped worker holds no connection (the engine reconnects if it runs again); one a
        # thread left behind still uses is closed when that thread gives it back.
        self.core.executor.close_round_connection()
        self.engine.dispose()
        if self._listen_engine is not self.engine:
            self._listen_engine.dispose()
        if self._denied is not None:
            raise self._denied
        logger.info("worker %s stopped: %s", self.worker_id, self.summary)
        return self.summary

    def _serve(self) -> None:
        """Settle what this run serves: the queues given, else every queue the app's tasks and
        schedules declare (as registered now); and which tasks it claims (those registered,
        so a job of a task only newer code knows waits for a worker that runs that code)."""
        queues = self.config.queues or tuple(self.core.declared_queues())
        if not queues:
            raise ConfigurationError(
                "the worker has no queue to serve: this queue has no registered task; register one with "
                "@queue.task, or name the queues with queues=[...] (--queues)")
        self.queues = queues
        tasks = self.core.tasks.names()
        self.claim_loop.serve(queues, tasks)
        self._scheduler.serve(queues)
        self.registration.description = dataclasses.replace(
            self.registration.description, queues=queues, tasks=tuple(sorted(tasks)))

    def stop(self) -> None:
        """Ask `run` to stop claiming and shut down gracefully (thread-safe)."""
        self._stopping.set()
        self._wake.set()

    def _halt(self, error: PermissionDeniedError) -> None:
        """The database refused a statement for lack of a privilege (the claim loop, a periodic
        service, the lease keeper or an outcome): stop as `stop` does; `run` then raises the
        first such error. Thread-safe."""
        with self._denied_lock:
            first = self._denied is None
            if first:
                self._denied = error
        if first:
            logger.error("worker %s: stopping: the database role lacks a privilege: %s (the grants a "
                         "worker needs: docs/how-to/database-roles.md)", self.worker_id, error)
        self.stop()

    def _hurry(self) -> None:
        """A second stop request: skip what is left of the grace period."""
        self._signals = max(self._signals, 2)
        self.stop()

    # -- lease keeper -----------------------------------------------------------------

    def _act_on_leases(self, keeper: Any, result: LeaseKeeperResult) -> None:
        """Record what the lease keeper gave up: timed-out handlers fail their attempt, fenced
        jobs are reported, lost ones (already reported by the heartbeat) counted."""
        for held in result.timed_out:
            self.runs.cancel(held)
            self.runs.record_held(held, timed_out(held))
        for held in result.fenced:
            self.runs.cancel(held)
            self.runs.report_fenced(held, "lease could not be renewed before it expired")
        for held in result.lost:
            self.runs.cancel(held)
            self.slots.count("lost")
        for held in (*result.fenced, *result.lost):
            if not held.started:  # no handler will return it: its slot is free now
                self.slots.forget(held)
        for held in result.cancel_requested:
            logger.info("job %s: cancel requested; its handler was told", held.job.id)

    # -- shutdown ---------------------------------------------------------------------

    def _drain(self) -> None:
        """Stop claiming; keep completing while running handlers get the grace period; then
        release what is left (started or not) and complete the last finished jobs."""
        deadline = time.monotonic() + self.config.shutdown_grace
        while self._signals < 2:
            self.claim_loop.complete_finished()
            if not self.slots.running_count() or time.monotonic() >= deadline:
                break
            self._wake.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            self._wake.clear()
        leftover = [h for h in self.slots.snapshot() if h.move(HeldJob.SETTLED)]
        for held in leftover:
            self.runs.cancel(held)
        self.runs.release(leftover)
        self.claim_loop.complete_finished()

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
            logger.info("worker %s: %s received, finishing running jobs (grace %ss); "
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
        self.runs.forget_threads()
        keeper = Looper([self._lease_keeper], report=self._act_on_leases, halt=self._halt)
        threads = [
            threading.Thread(target=keeper.run, args=(self._done,),
                             kwargs={"longest_sleep": self._lease_keeper.config.tick},
                             name="sqla-queue-lease", daemon=True),
            threading.Thread(target=self.runs.outcome_thread, name="sqla-queue-outcomes", daemon=True),
        ]
        self._listener = Listener(
            self._listen_core,
            ListenerConfig(queues=self.queues, call_timeout=self.config.effective_call_timeout),
            Nudger(self.slots), self._done,  # type: ignore[arg-type]  # an Event's ``set`` is all it uses
        ) if self.config.listen else None
        listening: list[threading.Thread] = []
        # No halt: a role without DELETE keeps working, unarchived (the looper logs the refusal once).
        threads.append(threading.Thread(target=Looper([self._archiver]).run, args=(self._done,),
                                        name="sqla-queue-archive", daemon=True))
        for thread in threads:
            thread.start()
        self.claim_loop.after_warm_up = functools.partial(self._after_warm_up, listening)
        try:
            yield
        finally:
            self.claim_loop.after_warm_up = None
            self._done.set()
            if self._listener is not None:
                self._listener.interrupt()
            self.runs.wake_threads()
            # Idle handler threads exit at once. One still running a job that was just released
            # is abandoned (daemon threads die with the process): every second spent waiting
            # for it is a second in which that job may also run on another worker.
            join_until = time.monotonic() + (0 if self._signals >= 2 else 1)
            for thread in threads + listening + self.runs.threads:
                thread.join(timeout=max(0.0, join_until - time.monotonic()))
            self.runs.handler_loop.close(timeout=max(0.0, join_until - time.monotonic()))
            if self._listener is not None and listening and not listening[0].is_alive():
                self._listener.close()

    def _after_warm_up(self, listening: list[threading.Thread]) -> None:
        """What no claim waits for, once the start-up's first rounds are done (`ClaimLoop`'s
        warm-up: the first claim that finds nothing, or `claim_loop.WARM_UP` after the first
        claim): the registry row, and LISTEN on a connection of its own. Before the first claim
        they took a statement built and compiled, a round trip and a second connection's set-up
        from a worker's start-up; a notification sent before LISTEN is not lost, as the listener
        wakes the claim loop once it listens."""
        self.registration.register()
        if self._listener is not None:
            thread = threading.Thread(target=Looper([self._listener], halt=self._halt).run, args=(self._done,),
                                      name="sqla-queue-listen", daemon=True)
            listening.append(thread)
            thread.start()

    def _listener_connected(self) -> bool:
        """True while LISTEN is active (tests wait on it before measuring wake-ups)."""
        return self._listener is not None and self._listener.connected.is_set()


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
    """Where a claim that returned `jobs` got to in the default claim order (`PriorityOrder`,
    ``(priority, run_at, id)``): what `Queue.complete_and_claim`'s ``from_position`` takes."""
    return DEFAULT_ORDER.position(jobs)
