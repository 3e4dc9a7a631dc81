"""The Queue facade: what applications call. Each method delegates to one part of the queue's
`Core` (`sqla_queue.core`): `Enqueuer`, `Outcomes`, `Operations`, the task registry and the
schedules, all on one executor. docs/reference/api.md documents every member.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Unpack, overload

from sqlalchemy import Connection, Engine

from . import _validate, sql
from ._tasks import EnqueueOptions, P, Handler, Task, TaskDecorator, TaskOptions, TaskRegistry, task_options
from .core import Core, waiter
from .core.enqueue import enqueue_options
from .core.workflows import dependency_graph, queue_batch_status
from .core.operations import DEFAULT_BULK_LIMIT, DEFAULT_HISTORY, DEFAULT_SAMPLE_RETENTION, DEFAULT_WORKERS_WITHIN
from .core.schedules import PeriodicOptions, Schedule, Schedules
from .db.executor import Executor
from .errors import ConfigurationError
from .tables import job_table_of
from .workflow import BatchStatus, batch_items, chain_items
from .plugins.calls import configure
from .plugins.manager import build_plugin_manager
from .services import pruning
from .sql.claim import DEFAULT_ORDER, ClaimOrder
from .types import (DEFAULT_LEASE, DEFAULT_STATS_WINDOW, ClaimedJob, JobContext, JobStatus, LimitOptions, Outcome,
                    QueueLimits, QueueState)

if TYPE_CHECKING:  # never imported at run time: a worker has no use for the ORM (`db.kinds`), nor the reads' types
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
    from sqlalchemy.orm import Session

    from .reports import BulkResult, HistoryPoint, JobPage, JobView, QueueStats, WorkerInfo, WorkerSeen
    from .worker import Worker

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_RECOVERY_LIMIT = 100


class Queue:
    """A job queue on one PostgreSQL table (`model`'s), reached through `engine` (an `Engine`,
    an `AsyncEngine` or a ``postgresql://`` URL). The other options, plugins, payload and result
    limits, the claim order and inline testing, are in docs/reference/api.md#queue."""

    def __init__(self, engine: Engine | AsyncEngine | str, *, model: type | None = None, plugins: Iterable[object | str] = (),
                 load_entrypoints: bool = True, blocked_plugins: Iterable[str] = (),
                 max_payload_bytes: int = _validate.DEFAULT_MAX_PAYLOAD_BYTES,
                 max_result_bytes: int = _validate.DEFAULT_MAX_RESULT_BYTES,
                 claim_order: ClaimOrder = DEFAULT_ORDER, testing: str | None = None) -> None:
        max_payload_bytes = _validate.config_positive_int(max_payload_bytes, "max_payload_bytes")
        max_result_bytes = _validate.config_positive_int(max_result_bytes, "max_result_bytes")
        if not isinstance(claim_order, ClaimOrder):
            raise ConfigurationError(f"claim_order must be a sqla_queue.sql.claim.ClaimOrder, got {claim_order!r}")
        self.model = model
        self.table = job_table_of(model)
        tasks = TaskRegistry()
        self.plugin_manager = build_plugin_manager(plugins, load_entrypoints=load_entrypoints,
                                                   blocked=blocked_plugins, tasks=tasks)
        self.core = Core(Executor.adopt(engine, self.table, claim_order), tasks, Schedules(tasks),
                         self.plugin_manager, max_payload_bytes=max_payload_bytes, max_result_bytes=max_result_bytes)
        self._inline = None if testing is None else _inline_runner(lambda: self.core, testing)  # `core` may change
        configure(self.plugin_manager, self)

    def on_engine(self, engine: Engine, *, call_timeout: float | None = None) -> Queue:
        """This queue (same table, tasks and plugins) running its statements on `engine`, each
        call under a client-side deadline of `call_timeout` seconds (None: none)."""
        other = copy.copy(self)
        other.core = self.core.on_engine(engine, call_timeout=call_timeout)
        return other

    @property
    def engine(self) -> Engine:
        """The engine our statements run on (a READ COMMITTED view of the one given)."""
        return self.core.engine

    @property
    def call_timeout(self) -> float | None:
        return self.core.executor.call_timeout

    @property
    def max_payload_bytes(self) -> int:
        return self.core.enqueuer.max_payload_bytes

    @max_payload_bytes.setter
    def max_payload_bytes(self, value: int) -> None:
        self.core.enqueuer.max_payload_bytes = _validate.config_positive_int(value, "max_payload_bytes")

    @property
    def max_result_bytes(self) -> int:
        return self.core.outcomes.max_result_bytes

    @property
    def notify_channel(self) -> str:
        """The LISTEN/NOTIFY channel enqueues on this table announce themselves on."""
        return sql.channel_name(self.table)

    # -- tasks ---------------------------------------------------------------------------

    @overload
    def task(self, func: Callable[[P, JobContext], Any]) -> Task[P]: ...
    @overload
    def task(self, func: None = None, **options: Unpack[TaskOptions]) -> TaskDecorator: ...

    def task(self, func: Handler | None = None, **options: Unpack[TaskOptions]) -> Any:
        """Register a handler ``(payload, ctx)``: ``@queue.task`` or ``@queue.task(...)`` with `TaskOptions`;
        returns a `Task` typed by the handler's payload, whose ``enqueue`` a type checker checks."""
        chosen = task_options(dict(options))

        def register(handler: Handler) -> Task[Any]:
            return self.core.tasks.register(handler, **chosen, owner=self)

        return register(func) if func is not None else register

    def get_task(self, task_or_name: Task | Handler | str) -> Task:
        return self.core.tasks.resolve(task_or_name)

    @property
    def task_names(self) -> list[str]:
        return self.core.tasks.names()

    # -- enqueue -------------------------------------------------------------------------

    def enqueue(self, task: Task | Handler | str, payload: Mapping[str, Any], *, session: Session | None = None,
                connection: Connection | None = None, **options: Unpack[EnqueueOptions]) -> int:
        """Enqueue one job and return its id, in the caller's transaction (``session=`` or
        ``connection=``: it exists exactly when that commits) or committed on its own. An active
        job holding the `idempotency_key` gives its id instead (docs/reference/api.md)."""
        job_id = self.core.enqueuer.enqueue(task, payload, enqueue_options(options, "enqueue()"), session, connection)
        if self._inline is not None:
            self._inline.enqueued([job_id], session, connection)
        return job_id

    def enqueue_many(self, jobs: Iterable[Mapping[str, Any]], *, session: Session | None = None,
                     connection: Connection | None = None) -> list[int]:
        """Enqueue many jobs (mappings with ``task``, ``payload`` and any `EnqueueOptions`) in one
        statement, every one validated first; ids in input order."""
        ids = self.core.enqueuer.enqueue_many(jobs, session, connection)
        if self._inline is not None and ids:
            self._inline.enqueued(ids, session, connection)
        return ids

    def chain(self, steps: Iterable[tuple[Task | Handler | str, Mapping[str, Any]]], *,
              session: Session | None = None, connection: Connection | None = None) -> list[int]:
        """`enqueue_many` of ``(task, payload)`` steps, each waiting for the one before (its result in
        ``ctx.dependency_results``; a failed step cancels the rest); ids in step order."""
        return self.enqueue_many(chain_items(steps), session=session, connection=connection)

    def batch(self, jobs: Iterable[Mapping[str, Any]], *, on_complete: tuple[Task | Handler | str, Mapping[str, Any]],
              session: Session | None = None, connection: Connection | None = None) -> int:
        """`enqueue_many` of `jobs` and a callback ``on_complete=(task, payload)`` run once every job
        is terminal (it reads ``ctx.batch``); the batch id (the callback's job id)."""
        return self.enqueue_many(batch_items(jobs, on_complete), session=session, connection=connection)[-1]

    async def batch_async(self, jobs: Iterable[Mapping[str, Any]], *, on_complete: tuple[Any, Mapping[str, Any]],
                          session: AsyncSession | None = None, connection: AsyncConnection | None = None) -> int:
        """`batch` for asyncio code (see `enqueue_async`)."""
        return (await self.enqueue_many_async(batch_items(jobs, on_complete), session=session, connection=connection))[-1]

    def batch_status(self, batch_id: int) -> BatchStatus:
        """Where batch `batch_id` stands: its jobs' counts by status and its callback's status."""
        return queue_batch_status(self.core, _validate.job_id(batch_id, "batch_id"))

    async def enqueue_async(self, task: Task | Handler | str, payload: Mapping[str, Any], *,
                            session: AsyncSession | None = None, connection: AsyncConnection | None = None,
                            **options: Unpack[EnqueueOptions]) -> int:
        """`enqueue` for asyncio code, in the caller's `AsyncSession` or `AsyncConnection`, or on
        the queue's asyncio engine (docs/how-to/asyncio.md)."""
        self._refuse_inline("enqueue_async")
        checked = enqueue_options(options, "enqueue_async()")
        return await self.core.enqueuer.enqueue_async(task, payload, checked, session, connection)

    async def enqueue_many_async(self, jobs: Iterable[Mapping[str, Any]], *, session: AsyncSession | None = None,
                                 connection: AsyncConnection | None = None) -> list[int]:
        """`enqueue_many` for asyncio code (see `enqueue_async`)."""
        self._refuse_inline("enqueue_many_async")
        return await self.core.enqueuer.enqueue_many_async(jobs, session, connection)

    async def dispose_async(self) -> None:
        """Close the pooled connections of the asyncio engine this queue made from its URL."""
        await self.core.executor.dispose_async()

    # -- claim and outcomes --------------------------------------------------------------

    def claim(self, queue: str = DEFAULT_QUEUE, *, worker_id: str, limit: int = 1,
              lease: timedelta | float = DEFAULT_LEASE) -> list[ClaimedJob]:
        """Claim up to `limit` due jobs of `queue` under one fresh token and `lease`, committed at once."""
        return self.core.outcomes.claim(queue, worker_id, limit, lease)

    def complete_and_claim(self, finished: Iterable[ClaimedJob], queue: str = DEFAULT_QUEUE, *, worker_id: str,
                           limit: int, from_position: Any = None, results: Mapping[int, Any] | None = None,
                           lease: timedelta | float = DEFAULT_LEASE) -> tuple[dict[int, bool], list[ClaimedJob]]:
        """Complete `finished` jobs (storing `results`) and claim up to `limit` more in one
        statement, from `from_position` in claim order if given (`ClaimOrder.position`)."""
        finished, outcomes = list(finished), self.core.outcomes
        texts = outcomes.result_texts(finished, results)
        return outcomes.complete_and_claim(finished, [queue], worker_id, limit, {queue: from_position}, texts, lease)

    def complete(self, job_id: int, claim_token: str, *, result: Any = None) -> bool:
        """Complete a claimed job, storing `result`; False: the claim was lost (replays say True)."""
        return self.core.outcomes.complete(job_id, claim_token, self.core.outcomes.result_text(result, f"job {job_id}"))

    def complete_many(self, jobs: Iterable[ClaimedJob], *, results: Mapping[int, Any] | None = None) -> dict[int, bool]:
        """Complete many claimed jobs in one statement: ``{job id: completed?}``."""
        jobs = list(jobs)
        return self.core.outcomes.complete_many(jobs, self.core.outcomes.result_texts(jobs, results))

    def snooze(self, job: ClaimedJob, delay: timedelta | float) -> Outcome | None:
        """Pending again after `delay`, the attempt given back; None: the claim was lost."""
        return self.core.outcomes.snooze(job, delay)

    def retry(self, job_id: int, claim_token: str, *, error: BaseException | str, run_at: datetime | None = None,
              delay: timedelta | float | None = None) -> Outcome | None:
        """A failed attempt: pending at `run_at` (or after `delay`) while attempts remain, else
        failed; None: the claim was lost."""
        return self.core.outcomes.retry(job_id, claim_token, error, run_at, delay)

    def fail(self, job_id: int, claim_token: str, *, error: BaseException | str) -> bool:
        """A claimed job to terminal ``failed`` now; False: the claim was lost."""
        return self.core.outcomes.fail(job_id, claim_token, error) is not None

    def handle_failure(self, job: ClaimedJob, error: BaseException) -> Outcome | None:
        """Retry or fail a job whose handler raised, as the strategy hooks decide."""
        return self.core.outcomes.handle_failure(job, error)

    def heartbeat(self, jobs: Iterable[ClaimedJob], *, lease: timedelta | float | None = None) -> set[int]:
        """Restart the lease of each job still held under its token, for `lease` (None: the claim's own); the renewed ids."""
        return self.core.outcomes.heartbeat(jobs, lease)

    def renew(self, jobs: Iterable[ClaimedJob], *, lease: timedelta | float | None = None) -> dict[int, bool]:
        """`heartbeat`, saying per renewed job whether a cancel was requested."""
        return self.core.outcomes.renew(jobs, lease)

    def release(self, jobs: Iterable[ClaimedJob]) -> list[int]:
        """Give unfinished jobs back (pending now, the interrupted attempt not counted)."""
        return self.core.outcomes.release(jobs)

    def report_fenced(self, job: ClaimedJob, reason: str) -> None:
        """Report a claim its runner gave up without the database saying so (lost-claim event,
        operation ``"fence"``)."""
        self.core.outcomes.report_fenced(job, reason)

    def worker(self, **options: Any) -> Worker:
        """A worker for this queue; options are `sqla_queue.worker.WorkerConfig`'s fields."""
        from .worker import Worker

        return Worker(self.core, **options)

    # -- recovery, reads, operator actions -----------------------------------------------

    def recover_expired(self, *, lease: timedelta | float = DEFAULT_LEASE,
                        limit: int = DEFAULT_RECOVERY_LIMIT) -> list[int]:
        """Take back running jobs whose holder's lease expired (database time), at most `limit` of
        each kind; `lease` judges only rows claimed before sqlaq_0008. Returns their ids."""
        return self.core.outcomes.recover_expired(lease, limit)

    def get_job(self, job_id: int) -> JobView | None:
        return self.core.operations.get_job(job_id)

    async def get_job_async(self, job_id: int, *, session: AsyncSession | None = None,
                            connection: AsyncConnection | None = None) -> JobView | None:
        """`get_job` for asyncio code, in the caller's `AsyncSession` or `AsyncConnection`, or on
        the queue's asyncio engine (as `enqueue_async`)."""
        return await self.core.operations.get_job_async(job_id, session, connection)

    def stats(self, *, window: timedelta | float = DEFAULT_STATS_WINDOW) -> QueueStats:
        """Every queue's health signals: active jobs now, finished jobs and events in `window`."""
        return self.core.operations.stats(window)

    async def stats_async(self, *, window: timedelta | float = DEFAULT_STATS_WINDOW,
                          session: AsyncSession | None = None,
                          connection: AsyncConnection | None = None) -> QueueStats:
        """`stats` for asyncio code (see `get_job_async`)."""
        return await self.core.operations.stats_async(window, session, connection)

    def dependencies(self, job_id: int) -> dict[str, list[dict[str, Any]]]:
        """``{"depends_on": [...], "dependents": [...]}`` of job `job_id`: ``{"id", "task", "status",
        "run_anyway"}`` each, by id (task and status None once pruned; docs/how-to/workflows.md)."""
        return dependency_graph(self.core, _validate.job_id(job_id))

    def list_jobs(self, *, status: JobStatus | str | None = None, queue: str | None = None, task: str | None = None,
                  limit: int = 50, before_id: int | None = None, created_after: datetime | None = None,
                  created_before: datetime | None = None) -> JobPage:
        """A page of jobs, newest first; ``before_id=page.next_before`` for the next."""
        return self.core.operations.list_jobs(status=status, queue_name=queue, task=task, limit=limit,
                                              before_id=before_id, created_after=created_after,
                                              created_before=created_before)

    async def list_jobs_async(self, *, status: JobStatus | str | None = None, queue: str | None = None,
                              task: str | None = None, limit: int = 50, before_id: int | None = None,
                              created_after: datetime | None = None, created_before: datetime | None = None,
                              session: AsyncSession | None = None,
                              connection: AsyncConnection | None = None) -> JobPage:
        """`list_jobs` for asyncio code (see `get_job_async`)."""
        return await self.core.operations.list_jobs_async(
            session, connection, status=status, queue_name=queue, task=task, limit=limit, before_id=before_id,
            created_after=created_after, created_before=created_before)

    def retry_now(self, job_id: int) -> JobView:
        """A failed job pending and due now, with at least one attempt left."""
        return self.core.operations.retry_now(job_id)

    def cancel(self, job_id: int) -> JobView:
        """Cancel a pending job now, or ask a running one's worker to (``ctx.cancel_requested``)."""
        return self.core.operations.cancel(job_id)

    def retry_jobs(self, *, queue_name: str | None = None, task: str | None = None,
                   job_ids: Iterable[int] | None = None, limit: int = DEFAULT_BULK_LIMIT) -> BulkResult:
        """`retry_now` for up to `limit` failed jobs matching the filters, in one statement."""
        return self.core.operations.retry_jobs(queue_name=queue_name, task=task, job_ids=job_ids, limit=limit)

    def cancel_jobs(self, *, status: JobStatus | str | None = None, queue_name: str | None = None,
                    task: str | None = None, job_ids: Iterable[int] | None = None,
                    limit: int = DEFAULT_BULK_LIMIT) -> BulkResult:
        """`cancel` for up to `limit` active jobs matching the filters, in one statement."""
        return self.core.operations.cancel_jobs(status=status, queue_name=queue_name, task=task,
                                                job_ids=job_ids, limit=limit)

    def record_sample(self, *, retention: timedelta | float = DEFAULT_SAMPLE_RETENTION) -> int:
        """Record the last minute of every queue behind `history` (once per minute)."""
        return self.core.operations.record_sample(retention)

    def history(self, *, since: timedelta | float = DEFAULT_HISTORY, queue_name: str | None = None) -> list[HistoryPoint]:
        """The per-minute samples of the last `since`, ordered by (minute, queue)."""
        return self.core.operations.history(since, queue_name)

    def workers_seen(self, *, within: timedelta | float = DEFAULT_WORKERS_WITHIN) -> list[WorkerSeen]:
        """The workers holding jobs now or that finished one within `within`."""
        return self.core.operations.workers_seen(within)

    def workers(self, *, include_dead: bool = True) -> list[WorkerInfo]:
        """The worker registry, live workers first (dead ones: ``alive=False``)."""
        return self.core.operations.workers(include_dead)

    def pause(self, queue_name: str) -> QueueState:
        """Stop every worker claiming from `queue_name` until `resume` (cluster-wide)."""
        return self.core.operations.pause(queue_name)

    def resume(self, queue_name: str) -> QueueState:
        return self.core.operations.resume(queue_name)

    def set_limits(self, queue_name: str, **limits: Unpack[LimitOptions]) -> QueueLimits | None:
        """Flow control for `queue_name`, cluster-wide, enforced by every claim (docs/how-to/limits.md)."""
        return self.core.limits.set(queue_name, **limits)

    def list_queues(self) -> list[QueueState]:
        """Every queue with active jobs, a pause record or limits."""
        return self.core.operations.list_queues(self.core.limits.all())

    def prune(self, **options: Any) -> pruning.PruneResult:
        """Delete old finished jobs until caught up; options are `PruneConfig`'s fields."""
        return pruning.prune(self.core, **options)

    # -- results -------------------------------------------------------------------------

    def wait(self, job_id: int, timeout: timedelta | float | None = None) -> JobView:
        """Block until job `job_id` is finished and return its view (`WaitTimeoutError` first)."""
        return waiter.wait(self.core, job_id, timeout)

    async def wait_async(self, job_id: int, timeout: timedelta | float | None = None) -> JobView:
        """`wait` for asyncio code, on the queue's asyncio engine."""
        return await waiter.wait_async(self.core, job_id, timeout)

    # -- schedules -----------------------------------------------------------------------

    def periodic(self, task: Task | Handler | None = None, **options: Unpack[PeriodicOptions]) -> Any:
        """Enqueue a task on a schedule, each tick once across all workers:
        ``@queue.periodic(cron="*/5 * * * *")`` or ``@queue.periodic(every=30)`` above
        ``@queue.task`` (`PeriodicOptions`; docs/how-to/schedule-jobs.md). Returns the task."""

        def declare(target: Task | Handler) -> Task:
            return self.core.schedules.periodic(target, register=self.task,
                                                max_payload_bytes=self.max_payload_bytes, **options)

        return declare(task) if task is not None else declare

    @property
    def schedules(self) -> list[Schedule]:
        """The schedules declared with `periodic`, in declaration order."""
        return self.core.schedules.all()

    def _refuse_inline(self, method: str) -> None:
        if self._inline is not None:
            raise ConfigurationError(f"{method} does not run jobs inline (testing='inline' covers enqueue and "
                                     "enqueue_many); in asyncio tests use a queue without testing= and drain_async")


def _inline_runner(core: Callable[[], Core], mode: Any) -> Any:
    """The testing aid behind ``testing="inline"``, imported only when asked for."""
    from .worker.inline import InlineRunner, testing_mode

    testing_mode(mode)
    return InlineRunner(core)

