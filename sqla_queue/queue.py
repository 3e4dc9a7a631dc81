"""The Queue facade: enqueue in the caller's transaction, claim, record outcomes, recover.

`Queue` composes small objects and delegates every public method to one of them: `Enqueuer`
(`_enqueue`: validation, key resolution, the INSERT), `Outcomes` (`_outcomes`: claims,
outcomes, leases, recovery), `Operations` (`operations`: stats, listing, operator actions) and
`Counters` (`_counters`), all running their statements through one `Executor` (`_executor`).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, Engine, Table
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from . import _validate
from .core import waiter as _waiter
from .services import pruning as maintenance
from . import sql
from .core.counters import Counters, EmptyClaimThrottle
from .core.enqueue import Enqueuer
from .db.executor import Executor
from .core.handler_transaction import HandlerSessions, HandlerTransaction
from .core.outcomes import Outcomes
from .plugins.manager import build_plugin_manager, configure
from ._tasks import Handler, KeyFunction, RetryDelay, Task, TaskRegistry
from .errors import ConfigurationError
from .models import Job
from .core.operations import (
    DEFAULT_BULK_LIMIT,
    DEFAULT_HISTORY,
    DEFAULT_SAMPLE_RETENTION,
    DEFAULT_WORKERS_WITHIN,
    Operations,
)
from .core.schedules import Schedule, Schedules
from .types import (
    DEFAULT_LEASE,
    DEFAULT_STATS_WINDOW,
    BulkResult,
    ClaimedJob,
    HistoryPoint,
    JobPage,
    JobStatus,
    JobView,
    Outcome,
    QueueState,
    QueueStats,
    WorkerSeen,
)

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_RECOVERY_LIMIT = 100

if TYPE_CHECKING:
    from .worker.worker import Worker

H = TypeVar("H", bound=Handler)


class Queue:
    """A job queue on one PostgreSQL table.

    :param engine: a SQLAlchemy `Engine`, an `AsyncEngine`, or a ``postgresql://`` URL (psycopg
        3 is used). A URL serves synchronous and asyncio calls alike; an `AsyncEngine` only
        asyncio ones (a synchronous call says what to pass instead).
    :param model: the mapped job class (default `sqla_queue.Job`); any class built on
        `sqla_queue.JobMixin` works.
    :param plugins: plugin objects or modules to register after the entry points, and names
        of installed entry points to enable (``["content_hash"]``): an installed plugin that
        implements a strategy hook takes part only when named here, in ``SQLA_QUEUE_PLUGINS``
        or with ``sqla-queue --plugin``. An unknown name is a `ConfigurationError`.
    :param load_entrypoints: register the installed plugins that only observe (lifecycle and
        setup hooks) and honour ``SQLA_QUEUE_PLUGINS`` (the first also off when
        ``SQLA_QUEUE_DISABLE_PLUGIN_AUTOLOAD`` is set). Off: only what ``plugins=`` names.
    :param blocked_plugins: plugin names never to register (built-ins included, e.g.
        ``"sqla_queue.logging"``).
    :param max_payload_bytes: the largest payload accepted, as encoded JSON; default 1 MiB
        (docs/explanation/delivery-semantics.md says why). A task's own limit wins.
    :param max_result_bytes: the largest handler return value stored as a job's result, as
        encoded JSON; default 64 KiB. A larger one fails that attempt (never truncated).
    :param testing: ``"inline"`` runs each job's handler when the transaction that enqueued
        it commits (`enqueue`, `enqueue_many`): a testing aid, never for production
        (`sqla_queue.testing.inline`). Default None.
    """

    def __init__(
        self,
        engine: Engine | AsyncEngine | str,
        *,
        model: type = Job,
        plugins: Iterable[object | str] = (),
        load_entrypoints: bool = True,
        blocked_plugins: Iterable[str] = (),
        max_payload_bytes: int = _validate.DEFAULT_MAX_PAYLOAD_BYTES,
        max_result_bytes: int = _validate.DEFAULT_MAX_RESULT_BYTES,
        testing: str | None = None,
    ) -> None:
        self._inline = None if testing is None else _inline_runner(self, testing)
        max_payload_bytes = _validate.config_positive_int(max_payload_bytes, "max_payload_bytes")
        self.max_result_bytes = _validate.config_positive_int(max_result_bytes, "max_result_bytes")
        self.model = model
        self.table = _table_of(model)
        executor = Executor.adopt(engine, self.table)
        self._tasks = TaskRegistry()
        self._schedules = Schedules(self._tasks)
        self.plugin_manager = build_plugin_manager(
            plugins, load_entrypoints=load_entrypoints, blocked=blocked_plugins, tasks=self._tasks
        )
        self._compose(executor, EmptyClaimThrottle(), max_payload_bytes)
        configure(self.plugin_manager, self)

    def _compose(self, executor: Executor, throttle: EmptyClaimThrottle, max_payload_bytes: int) -> None:
        """The parts every public method delegates to, all on `executor`."""
        self._executor = executor
        self._enqueuer = Enqueuer(executor, self._tasks, self.plugin_manager, max_payload_bytes)
        self._counters = Counters(executor.statements, throttle)
        self._outcomes = Outcomes(executor, self.plugin_manager, self._counters)
        self._operations = Operations(executor, self.plugin_manager)

    def on_engine(self, engine: Engine, *, call_timeout: float | None = None) -> Queue:
        """This queue (same table, tasks and plugins) running its statements on `engine`,
        with a client-side deadline of `call_timeout` seconds on every call (None: none).

        What a worker does with its own engine, and the CLI with a ``--database-url``. The
        copy shares this queue's empty-claim tally; the original is unchanged."""
        other = copy.copy(self)
        other._compose(self._executor.on_engine(engine, call_timeout=call_timeout),
                       self._counters.throttle, self.max_payload_bytes)
        return other

    @property
    def executor(self) -> Executor:
        """The execution seam this queue runs on: for sqla_queue's services (worker, doctor,
        pruning, listener); not public API."""
        return self._executor

    @property
    def engine(self) -> Engine:
        """The engine our statements run on (a READ COMMITTED view of the one given)."""
        return self._executor.engine

    @property
    def call_timeout(self) -> float | None:
        """The client-side deadline on every call, in seconds; None outside a worker."""
        return self._executor.call_timeout

    @property
    def max_payload_bytes(self) -> int:
        """The largest payload accepted, as encoded JSON (a task's own limit wins)."""
        return self._enqueuer.max_payload_bytes

    @max_payload_bytes.setter
    def max_payload_bytes(self, value: int) -> None:
        self._enqueuer.max_payload_bytes = _validate.config_positive_int(value, "max_payload_bytes")

    @property
    def notify_channel(self) -> str:
        """The LISTEN/NOTIFY channel enqueues on this table announce themselves on."""
        return sql.channel_name(self.table)

    # -- tasks ---------------------------------------------------------------------------

    def task(
        self,
        func: H | None = None,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        timeout: timedelta | float | None = None,
        retry_delay: RetryDelay | float | None = None,
        idempotency_key: KeyFunction | None = None,
        max_payload_bytes: int | None = None,
        priority: int = 0,
        max_snoozes: int = _validate.DEFAULT_MAX_SNOOZES,
        session_factory: Callable[[], Session | AsyncSession] | None = None,
    ) -> Any:
        """Register a handler ``(payload, ctx)``; usable as ``@queue.task`` or ``@queue.task(...)``.

        `retry_delay` (a timedelta, seconds, or ``(attempt, error) -> timedelta | False | None``)
        and `idempotency_key` (``payload -> str | None``) are this task's own strategies: asked
        before any plugin, ``None`` deferring to them (docs/reference/hooks.md).
        `max_payload_bytes` replaces the queue's payload limit for this task. `priority` is its
        jobs' priority when `enqueue` names none; `max_snoozes` bounds how often one job may
        snooze (docs/how-to/results-snooze-cancel.md). `session_factory` (a ``sessionmaker``, or
        an ``async_sessionmaker`` for an ``async def`` handler) makes the session of
        ``ctx.transaction()``; by default one on this queue's engine
        (docs/explanation/delivery-semantics.md).
        """

        def register(handler: H) -> Task:
            return self._tasks.register(
                handler, name=name, queue=queue, max_attempts=max_attempts, timeout=timeout,
                retry_delay=retry_delay, idempotency_key=idempotency_key,
                max_payload_bytes=max_payload_bytes, priority=priority, max_snoozes=max_snoozes,
                session_factory=session_factory,
            )

        return register(func) if func is not None else register

    def get_task(self, task_or_name: Task | Handler | str) -> Task:
        return self._tasks.resolve(task_or_name)

    @property
    def task_names(self) -> list[str]:
        return self._tasks.names()

    # -- enqueue -------------------------------------------------------------------------

    def enqueue(
        self,
        task: Task | Handler | str,
        payload: Mapping[str, Any],
        *,
        queue: str | None = None,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
        priority: int | None = None,
        session: Session | None = None,
        connection: Connection | None = None,
    ) -> int:
        """Enqueue one job and return its id.

        With ``session=`` or ``connection=`` the job is written in that transaction and we never
        commit: it exists exactly when the caller's transaction commits. Otherwise it is
        committed on its own (docs/explanation/delivery-semantics.md says how).

        When an active (pending or running) job holds ``idempotency_key``, that job's id is
        returned and nothing is inserted. Once the holder completed or failed the key is free
        again and a new job is created. If the holder has not committed yet, this call waits for
        it, then returns its id (it committed) or inserts (it rolled back).

        `priority` (-32768 to 32767, default the task's, else 0): higher is claimed first; within
        a priority, jobs are claimed in due order (docs/explanation/priorities.md).
        """
        options = {"queue": queue, "run_at": run_at, "delay": delay, "max_attempts": max_attempts,
                   "idempotency_key": idempotency_key, "priority": priority}
        job_id = self._enqueuer.enqueue(task, payload, options, session, connection)
        if self._inline is not None:
            self._inline.enqueued([job_id], session, connection)
        return job_id

    def enqueue_many(
        self,
        jobs: Iterable[Mapping[str, Any]],
        *,
        session: Session | None = None,
        connection: Connection | None = None,
    ) -> list[int]:
        """Enqueue many jobs in one statement; ids come back in input order.

        Each job is a mapping with ``task`` and ``payload`` and any per-job option of
        `enqueue`. Every job is validated before anything is written.
        """
        ids = self._enqueuer.enqueue_many(jobs, session, connection)
        if self._inline is not None and ids:
            self._inline.enqueued(ids, session, connection)
        return ids

    async def enqueue_async(
        self,
        task: Task | Handler | str,
        payload: Mapping[str, Any],
        *,
        queue: str | None = None,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
        priority: int | None = None,
        session: AsyncSession | None = None,
        connection: AsyncConnection | None = None,
    ) -> int:
        """`enqueue` for asyncio code: the same arguments, checks, idempotency and plugins, in
        the caller's `AsyncSession` or `AsyncConnection` transaction, or without one committed
        in a transaction of its own on the queue's asyncio engine (docs/how-to/asyncio.md)."""
        options = {"queue": queue, "run_at": run_at, "delay": delay, "max_attempts": max_attempts,
                   "idempotency_key": idempotency_key, "priority": priority}
        self._refuse_inline("enqueue_async")
        return await self._enqueuer.enqueue_async(task, payload, options, session, connection)

    async def enqueue_many_async(
        self,
        jobs: Iterable[Mapping[str, Any]],
        *,
        session: AsyncSession | None = None,
        connection: AsyncConnection | None = None,
    ) -> list[int]:
        """`enqueue_many` for asyncio code (see `enqueue_async`)."""
        self._refuse_inline("enqueue_many_async")
        return await self._enqueuer.enqueue_many_async(jobs, session, connection)

    async def dispose_async(self) -> None:
        """Close the pooled connections of the asyncio engine this queue made from its URL (at
        an application's shutdown). An `AsyncEngine` you gave the queue is yours to dispose; the
        synchronous engine is ``queue.engine.dispose()``. The engine reconnects if used again."""
        await self._executor.dispose_async()

    # -- claim and outcomes --------------------------------------------------------------

    def claim(self, queue: str = DEFAULT_QUEUE, *, worker_id: str, limit: int = 1) -> list[ClaimedJob]:
        """Claim up to `limit` due jobs of `queue`, committed before this returns.

        All jobs of one claim share one fresh claim token; each outcome is fenced by
        ``(job id, token)``.
        """
        return self._outcomes.claim(queue, worker_id, limit)

    def complete_and_claim(
        self,
        finished: Iterable[ClaimedJob],
        queue: str = DEFAULT_QUEUE,
        *,
        worker_id: str,
        limit: int,
        from_position: tuple[int, datetime, int] | None = None,
        results: Mapping[int, Any] | None = None,
    ) -> tuple[dict[int, bool], list[ClaimedJob]]:
        """Complete `finished` jobs and claim up to `limit` more, in one statement.

        The worker's steady state: one round trip and one commit per round. Completion results
        are as for `complete_many`; ``limit=0`` only completes. `from_position` (a claimed job's
        ``(priority, run_at, id)``) starts the claim there in claim order instead of at the
        beginning, skipping the dead index entries earlier claims left behind (see
        `sqla_queue.worker.worker.claim_position`). `results` maps a finished job's id to its handler's
        return value, stored as its result.
        """
        texts = self._result_texts(finished, results)
        return self._outcomes.complete_and_claim(finished, queue, worker_id, limit, from_position, texts)

    def complete(self, job_id: int, claim_token: str, *, result: Any = None) -> bool:
        """Mark a claimed job completed, storing `result` (JSON, at most ``max_result_bytes``;
        `ResultError` otherwise). False means the claim was lost and nothing changed; a job
        someone asked to cancel ends cancelled instead (still True: the claim was ours).

        Safe to call again with the same token after a lost reply: it reports True.
        """
        text = None if result is None else _validate.result_json(result, f"job {job_id}", self.max_result_bytes)
        return self._outcomes.complete(job_id, claim_token, text)

    def complete_many(self, jobs: Iterable[ClaimedJob], *, results: Mapping[int, Any] | None = None) -> dict[int, bool]:
        """Complete many claimed jobs in one statement; ``{job id: completed?}``. `results` as
        for `complete_and_claim`.

        Each row is still checked against its own token. A job the batch statement did not
        complete is settled on its own by `complete`, which recognises a replay (True) and
        reports a lost claim (False).
        """
        jobs = list(jobs)
        return self._outcomes.complete_many(jobs, self._result_texts(jobs, results))

    def _result_texts(self, jobs: Iterable[ClaimedJob], results: Mapping[int, Any] | None) -> dict[int, str]:
        """Every result checked before anything is written (`ResultError` names the task)."""
        if not results:
            return {}
        whose = {job.id: f"task {job.task!r}" for job in jobs}
        return {job_id: _validate.result_json(value, whose.get(job_id, f"job {job_id}"), self.max_result_bytes)
                for job_id, value in results.items() if value is not None}

    def snooze(self, job: ClaimedJob, delay: timedelta | float) -> Outcome | None:
        """Put a claimed job back to pending after `delay` without spending its attempt (what a
        handler's `sqla_queue.Snooze` does). None means the claim was lost."""
        return self._outcomes.snooze(job, delay)

    def retry(
        self,
        job_id: int,
        claim_token: str,
        *,
        error: BaseException | str,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
    ) -> Outcome | None:
        """Record a failed attempt: pending again at `run_at` (or after `delay`, default now)
        while attempts remain, else terminal ``failed``. None means the claim was lost.

        An exception also stores its bounded, sanitized traceback (`JobView.last_traceback`)
        and reaches the retried/failed event as ``exception``."""
        return self._outcomes.retry(job_id, claim_token, error, run_at, delay)

    def fail(self, job_id: int, claim_token: str, *, error: BaseException | str) -> bool:
        """Move a claimed job to terminal ``failed`` now. False means the claim was lost."""
        return self._outcomes.fail(job_id, claim_token, error) is not None

    def handle_failure(self, job: ClaimedJob, error: BaseException) -> Outcome | None:
        """Retry or fail a job whose handler raised, as the strategy hooks decide.

        Non-retryable errors, a ``False`` delay, or exhausted attempts end in ``failed``. A
        strategy plugin that misbehaves is logged and the other registered plugins decide instead.
        """
        return self._outcomes.handle_failure(job, error)

    def heartbeat(self, jobs: Iterable[ClaimedJob]) -> set[int]:
        """Restart the lease of each job still held under its token; returns the renewed ids.

        A job missing from the result is a lost claim, reported through the lost-claim hook,
        unless its row was already finished under this same token: a worker's heartbeat races
        its own outcomes, and a job this claim completed (or retried, or failed) was not lost.
        """
        return self._outcomes.heartbeat(jobs)

    def renew(self, jobs: Iterable[ClaimedJob]) -> dict[int, bool]:
        """`heartbeat` that also says, per renewed job, whether someone asked to cancel it
        (`cancel`): ``{renewed job id: cancel requested?}``. What a worker's lease keeper runs."""
        return self._outcomes.renew(jobs)

    def release(self, jobs: Iterable[ClaimedJob]) -> list[int]:
        """Give unfinished jobs back (pending now, the interrupted attempt not counted)."""
        return self._outcomes.release(jobs)

    def worker(self, **options: Any) -> Worker:
        """A worker for this queue; options are `sqla_queue.worker.worker.WorkerConfig`'s fields."""
        from .worker.worker import Worker

        return Worker(self, **options)

    # -- recovery, reads -----------------------------------------------------------------

    def recover_expired(
        self, *, lease: timedelta | float = DEFAULT_LEASE, limit: int = DEFAULT_RECOVERY_LIMIT
    ) -> list[int]:
        """Take back running jobs whose lease (database time) expired; at most `limit` of each kind.

        Jobs with attempts left return to pending (``last_error = 'claim lease expired'``);
        jobs that expired on their last attempt go to failed. Returns the ids of both.
        """
        return self._outcomes.recover_expired(lease, limit)

    def get_job(self, job_id: int) -> JobView | None:
        return self._operations.get_job(job_id)

    def stats(self, *, window: timedelta | float = DEFAULT_STATS_WINDOW) -> QueueStats:
        """The health signals of every queue: active jobs now, finished jobs and counted events
        within `window` (default 15 minutes). See docs/how-to/operations.md."""
        return self._operations.stats(window)

    # -- operator actions (sqla_queue.core.operations, sqla_queue.services.pruning) ------------------

    def list_jobs(
        self,
        *,
        status: JobStatus | str | None = None,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 50,
        before_id: int | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
    ) -> JobPage:
        """A page of jobs, newest first; pass ``before_id=page.next_before`` for the next.
        `created_after` (inclusive) and `created_before` (exclusive), timezone-aware, bound
        the jobs' creation time."""
        return self._operations.list_jobs(status=status, queue_name=queue, task=task, limit=limit,
                                          before_id=before_id, created_after=created_after,
                                          created_before=created_before)

    def retry_now(self, job_id: int) -> JobView:
        """Make a failed job pending and due now, with at least one attempt left."""
        return self._operations.retry_now(job_id)

    def cancel(self, job_id: int) -> JobView:
        """Cancel a job: a pending one ends ``cancelled`` now; a running one gets a cancel
        request its worker passes on to the handler (`JobContext.cancel_requested`), ending
        ``cancelled`` when the handler returns or raises. A finished job is a `JobStateError`."""
        return self._operations.cancel(job_id)

    def retry_jobs(self, *, queue_name: str | None = None, task: str | None = None,
                   job_ids: Iterable[int] | None = None, limit: int = DEFAULT_BULK_LIMIT) -> BulkResult:
        """`retry_now` for up to `limit` failed jobs matching the filters (each optional), in
        one statement; jobs another transaction holds are skipped and counted
        (docs/how-to/operations.md, "Acting on many jobs")."""
        return self._operations.retry_jobs(queue_name=queue_name, task=task, job_ids=job_ids, limit=limit)

    def cancel_jobs(self, *, status: JobStatus | str | None = None, queue_name: str | None = None,
                    task: str | None = None, job_ids: Iterable[int] | None = None,
                    limit: int = DEFAULT_BULK_LIMIT) -> BulkResult:
        """`cancel` for up to `limit` pending and/or running jobs matching the filters (at least
        one), in one statement; jobs another transaction holds are skipped and counted."""
        return self._operations.cancel_jobs(status=status, queue_name=queue_name, task=task,
                                            job_ids=job_ids, limit=limit)

    # -- history and workers (what the dashboard plots) -----------------------------------

    def record_sample(self, *, retention: timedelta | float = DEFAULT_SAMPLE_RETENTION) -> int:
        """Record the last minute of every queue in the samples table behind `history`, unless
        someone already did, deleting samples older than `retention` (default 7 days); returns
        the rows written. Workers call it once a minute; one statement."""
        return self._operations.record_sample(retention)

    def history(self, *, since: timedelta | float = DEFAULT_HISTORY,
                queue_name: str | None = None) -> list[HistoryPoint]:
        """The per-minute samples of the last `since` (default one hour), of every queue or of
        `queue_name`, ordered by (minute, queue)."""
        return self._operations.history(since, queue_name)

    def workers_seen(self, *, within: timedelta | float = DEFAULT_WORKERS_WITHIN) -> list[WorkerSeen]:
        """The workers holding jobs now or that finished one within `within` (default 15
        minutes), by the ``locked_by`` of their claims, most recently seen first."""
        return self._operations.workers_seen(within)

    # -- queue control -------------------------------------------------------------------

    def pause(self, queue_name: str) -> QueueState:
        """Stop every worker claiming jobs of `queue_name`, within one poll interval, until
        `resume`: stored in the database, so it reaches every process. Running jobs finish and
        enqueues still land. Pausing a paused queue keeps its first pause time."""
        return self._operations.pause(queue_name)

    def resume(self, queue_name: str) -> QueueState:
        """Let workers claim jobs of `queue_name` again (nothing changes if it was not paused)."""
        return self._operations.resume(queue_name)

    def list_queues(self) -> list[QueueState]:
        """Every queue with active jobs or a pause record: its pause and its active jobs."""
        return self._operations.list_queues()

    # -- results -------------------------------------------------------------------------

    def wait(self, job_id: int, timeout: timedelta | float | None = None) -> JobView:
        """Block until job `job_id` is finished (completed, failed or cancelled) and return its
        view, result included. `timeout` in seconds or a timedelta (None: no limit); when it
        passes first, `WaitTimeoutError` names the job and its state. Woken by the finish
        notification, with a read of the row every second in case one is lost
        (docs/how-to/results-snooze-cancel.md)."""
        return _waiter.wait(self, job_id, timeout)

    async def wait_async(self, job_id: int, timeout: timedelta | float | None = None) -> JobView:
        """`wait` for asyncio code, on the queue's asyncio engine: the event loop is free while
        it waits."""
        return await _waiter.wait_async(self, job_id, timeout)

    # -- schedules -----------------------------------------------------------------------

    def periodic(
        self,
        task: Task | Handler | None = None,
        *,
        cron: str | None = None,
        every: timedelta | float | None = None,
        payload: Mapping[str, Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
        timezone: str | None = None,
        backfill: bool = False,
        name: str | None = None,
    ) -> Any:
        """Enqueue a task on a schedule: ``@queue.periodic(cron="*/5 * * * *")`` or
        ``@queue.periodic(every=timedelta(seconds=30))`` above ``@queue.task`` (a plain handler
        is registered with the task defaults). Returns the task.

        Exactly one of `cron` (croniter's syntax; a sixth field counts seconds) and `every` (a
        timedelta or seconds; ticks are multiples of it since the Unix epoch). `timezone` (an
        IANA name, default UTC) is the zone a cron expression is read in. Each tick becomes one
        job with `payload`, due at the tick, ``ctx.scheduled_at`` the tick, once across all
        workers. Ticks missed while no worker ran are skipped unless `backfill` (then up to
        `sqla_queue.core.schedules.MAX_BACKFILL` of the latest). `name` (default: the task's) must
        be unique. A bad option is a `ConfigurationError` (docs/how-to/schedule-jobs.md).
        """
        options = {"cron": cron, "every": every, "payload": payload, "queue": queue, "priority": priority,
                   "timezone": timezone, "backfill": backfill, "name": name}

        def declare(target: Task | Handler) -> Task:
            return self._schedules.periodic(target, register=self.task,
                                            max_payload_bytes=self.max_payload_bytes, **options)

        return declare(task) if task is not None else declare

    @property
    def schedules(self) -> list[Schedule]:
        """The schedules declared with `periodic`, in declaration order."""
        return self._schedules.all()

    def enqueue_tick(self, schedule: Schedule, tick: datetime, *, connection: Connection) -> int:
        """The job of one tick of `schedule` in the scheduler's transaction: due at the tick,
        its ``scheduled_at`` the tick, validated and announced like any enqueue. For the
        scheduler (`sqla_queue.core.schedules.fire_tick`, which decides that the tick is ours);
        not public API."""
        options = {"queue": schedule.queue, "run_at": tick, "priority": schedule.priority, "scheduled_at": tick}
        return self._enqueuer.enqueue(schedule.task, schedule.payload, options, None, connection)

    def handler_transaction(self, job: ClaimedJob, cancel_requested: threading.Event,
                            sessions: HandlerSessions, *,
                            on_settled: Callable[[str], bool] | None = None) -> HandlerTransaction:
        """What ``ctx.transaction()`` returns for one run of `job`, completing it on this
        queue's table; `on_settled` hears ``"completed"`` or ``"lost"`` the moment a block
        settles the job, and answers False if the runner had given the job up before. For whoever runs handlers (the worker, `sqla_queue.testing`); not
        public API."""
        return HandlerTransaction(self._outcomes, job, self._tasks.get(job.task), sessions,
                                  cancel_requested, max_result_bytes=self.max_result_bytes,
                                  on_settled=on_settled)

    def prune(self, **options: Any) -> maintenance.PruneResult:
        """Delete finished jobs older than ``completed_after`` / ``failed_after`` /
        ``cancelled_after`` in batches until caught up; options are
        `sqla_queue.services.pruning.PruneConfig`'s fields."""
        return maintenance.prune(self, **options)

    # -- self-fencing ----------------------------------------------------------------------

    def report_fenced(self, job: ClaimedJob, reason: str) -> None:
        """Report a claim its worker gave up without the database saying so (its lease could
        not be renewed, or its outcome not recorded, before the lease expired): the worker
        stops treating the job as its own, since recovery may hand it to someone else. The
        lost-claim event (operation ``"fence"``) is built here like every other one, so
        plugins see one shape whoever noticed the loss."""
        self._outcomes.report_fenced(job, reason)

    def _refuse_inline(self, method: str) -> None:
        if self._inline is not None:
            raise ConfigurationError(f"{method} does not run jobs inline (testing='inline' covers enqueue "
                                     "and enqueue_many); in asyncio tests enqueue on a queue without "
                                     "testing= and run the jobs with sqla_queue.testing.drain_async")


# -- helpers -----------------------------------------------------------------------------


def _inline_runner(queue: Queue, mode: Any) -> Any:
    """The testing aid behind ``testing="inline"``, imported only when asked for."""
    from .testing.inline import InlineRunner, testing_mode

    testing_mode(mode)
    return InlineRunner(queue)


def _table_of(model: type) -> Table:
    table = getattr(model, "__table__", None)
    if not isinstance(table, Table) or "claim_token" not in table.c:
        raise ConfigurationError(
            f"model must be a mapped class built on sqla_queue.JobMixin, got {model!r}"
        )
    return table

