"""The Queue facade: enqueue in the caller's transaction, claim, record outcomes, recover.

Every statement comes from `sqla_queue.sql`, built once per Queue for its table; this module
only binds values, executes, maps rows to the public dataclasses and calls hooks. The enqueue
machinery (validation into columns, key resolution, the autocommit path) is `_enqueue`'s.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from functools import cached_property
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, Engine, Table
from sqlalchemy.orm import Session

from . import _validate, maintenance, operations, sql
from ._deadline import deadline
from ._driver import DriverStatement
from ._enqueue import Enqueuing
from ._engine import (
    database_errors,
    library_engine,
    runs_single_statements_in_autocommit,
)
from ._plugins import (
    build_plugin_manager,
    configure,
    emit,
    emit_each,
    failure_decision,
)
from ._sanitize import error_text, traceback_text
from ._tasks import Handler, KeyFunction, RetryDelay, Task, TaskRegistry
from .errors import (
    ConfigurationError,
    InvalidInputError,
)
from .models import Job
from .types import (
    DEFAULT_LEASE,
    DEFAULT_STATS_WINDOW,
    ClaimedJob,
    EmptyClaim,
    JobClaimed,
    JobCompleted,
    JobFailed,
    JobRecovered,
    JobRetried,
    JobStatus,
    JobPage,
    JobView,
    LostClaim,
    Outcome,
    QueueStats,
)

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_RECOVERY_LIMIT = 100

if TYPE_CHECKING:
    from .worker import Worker

H = TypeVar("H", bound=Handler)


class Queue(Enqueuing):
    """A job queue on one PostgreSQL table.

    :param engine: a SQLAlchemy `Engine` or a ``postgresql://`` URL (psycopg 3 is used).
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
    """

    def __init__(
        self,
        engine: Engine | str,
        *,
        model: type = Job,
        plugins: Iterable[object | str] = (),
        load_entrypoints: bool = True,
        blocked_plugins: Iterable[str] = (),
        max_payload_bytes: int = _validate.DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        self.max_payload_bytes = _validate.config_positive_int(max_payload_bytes, "max_payload_bytes")
        self.engine = library_engine(engine)
        self.model = model
        self.table = _table_of(model)
        self._tasks = TaskRegistry()
        self.plugin_manager = build_plugin_manager(
            plugins, load_entrypoints=load_entrypoints, blocked=blocked_plugins, tasks=self._tasks
        )
        self.call_timeout: float | None = None
        self._autocommit_engine: Engine | None = None
        configure(self.plugin_manager, self)

    def _bound_to(self, engine: Engine, *, call_timeout: float | None) -> Queue:
        """This queue (same tasks and plugins) on another engine, with a client-side deadline
        on every call: what a worker uses for its own connections."""
        view = copy.copy(self)
        view.engine = library_engine(engine)
        view.call_timeout = call_timeout
        view._autocommit_engine = engine if runs_single_statements_in_autocommit(engine) else None
        for compiled_for_the_other_engine in ("_round_statement", "_driver_statements"):
            view.__dict__.pop(compiled_for_the_other_engine, None)
        return view

    @property
    def notify_channel(self) -> str:
        """The LISTEN/NOTIFY channel enqueues on this table announce themselves on."""
        return sql.channel_name(self.table)

    @cached_property
    def _sql(self) -> SimpleNamespace:
        return SimpleNamespace(
            insert=sql.insert_jobs(self.table),
            insert_one=sql.insert_job(self.table),
            find_keys=sql.find_active_keys(self.table),
            claim=sql.claim_jobs(self.table),
            complete_and_claim=sql.complete_and_claim_jobs(self.table),
            complete=sql.complete_job(self.table),
            complete_many=sql.complete_jobs(self.table),
            retry=sql.retry_job(self.table),
            fail=sql.fail_job(self.table),
            requeue_expired=sql.requeue_expired(self.table),
            fail_expired=sql.fail_exhausted_expired(self.table),
            select_job=sql.select_job(self.table),
            claim_state=sql.claim_state(self.table),
            renew=sql.renew_leases(self.table),
            release=sql.release_jobs(self.table),
        )

    @cached_property
    def _round_statement(self) -> DriverStatement | None:
        if not DriverStatement.usable_on(self.engine.dialect):
            return None
        sample = {"queue": "", "worker_id": "", "limit": 0, "token": "", "job_ids": [], "tokens": [],
                  "from_run_at": None, "from_id": None}
        return DriverStatement(self._sql.complete_and_claim, self.engine.dialect, sample)

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
    ) -> Any:
        """Register a handler ``(payload, ctx)``; usable as ``@queue.task`` or ``@queue.task(...)``.

        `retry_delay` (a timedelta, seconds, or ``(attempt, error) -> timedelta | False | None``)
        and `idempotency_key` (``payload -> str | None``) are this task's own strategies: asked
        before any plugin, ``None`` deferring to them (docs/reference/hooks.md).
        `max_payload_bytes` replaces the queue's payload limit for this task.
        """

        def register(handler: H) -> Task:
            return self._tasks.register(
                handler, name=name, queue=queue, max_attempts=max_attempts, timeout=timeout,
                retry_delay=retry_delay, idempotency_key=idempotency_key,
                max_payload_bytes=max_payload_bytes,
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
        """
        jobs = self._new_batch()
        self._prepare(
            jobs, task, payload, queue=queue, run_at=run_at, delay=delay,
            max_attempts=max_attempts, idempotency_key=idempotency_key,
        )
        return self._enqueue_specs(jobs, session=session, connection=connection)[0]

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
        batch = self._new_batch()
        for index, job in enumerate(jobs):
            self._prepare_mapping(batch, index, job)
        return self._enqueue_specs(batch, session=session, connection=connection) if len(batch) else []

    @contextmanager
    def _caller_or_own_connection(
        self, session: Session | None, connection: Connection | None
    ) -> Iterator[Connection]:
        if session is not None:
            yield session.connection()
        elif connection is not None:
            yield connection
        else:
            with self._transaction() as conn:
                yield conn

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """Our own short transaction, committed on exit, inside the call deadline if any."""
        with self._connection() as conn, conn.begin():
            yield conn

    @contextmanager
    def _connection(self, engine: Engine | None = None) -> Iterator[Connection]:
        with database_errors(), (engine or self.engine).connect() as conn, deadline(conn, self.call_timeout):
            yield conn

    @contextmanager
    def _single_statement(self) -> Iterator[Connection]:
        """For one self-contained statement: autocommit on a worker's engine (one round trip,
        see `worker_engine`), our own transaction anywhere else."""
        if self._autocommit_engine is None:
            with self._transaction() as conn:
                yield conn
        else:
            with self._connection(self._autocommit_engine) as conn:
                yield conn

    # -- claim and outcomes --------------------------------------------------------------

    def claim(self, queue: str = DEFAULT_QUEUE, *, worker_id: str, limit: int = 1) -> list[ClaimedJob]:
        """Claim up to `limit` due jobs of `queue`, committed before this returns.

        All jobs of one claim share one fresh claim token; each outcome is fenced by
        ``(job id, token)``.
        """
        queue = _validate.name(queue, "queue")
        worker_id = _validate.name(worker_id, "worker_id")
        limit = _validate.positive_int(limit, "limit")
        params = {
            "queue": queue, "worker_id": worker_id, "limit": limit,
            "token": secrets.token_urlsafe(24),
        }
        with self._transaction() as conn:
            rows, empty_reason = self._claim_in(conn, params)
        jobs = sorted((_claimed_job(row) for row in rows), key=lambda j: j.id)
        self._emit_claimed(jobs, rows, queue, worker_id, limit, empty_reason)
        return jobs

    def _claim_in(self, conn: Connection, params: dict[str, Any]) -> tuple[list[Any], str | None]:
        rows = conn.execute(self._sql.claim, params).all()
        # Idle path only: an empty claim is classified and counted in the same transaction.
        empty_reason = None if rows else operations.count_empty_claim(self, conn, params["queue"])
        return rows, empty_reason

    def complete_and_claim(
        self,
        finished: Iterable[ClaimedJob],
        queue: str = DEFAULT_QUEUE,
        *,
        worker_id: str,
        limit: int,
        from_position: tuple[datetime, int] | None = None,
    ) -> tuple[dict[int, bool], list[ClaimedJob]]:
        """Complete `finished` jobs and claim up to `limit` more, in one statement.

        The worker's steady state: one round trip and one commit per round. Completion results
        are as for `complete_many`; ``limit=0`` only completes. `from_position` (a claimed job's
        ``(run_at, id)``) starts the claim there in claim order instead of at the beginning,
        skipping the dead index entries earlier claims left behind (see `claim_position`).
        """
        finished = list(finished)
        queue = _validate.name(queue, "queue")
        worker_id = _validate.name(worker_id, "worker_id")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise InvalidInputError(f"limit must be a non-negative integer, got {limit!r}")
        from_run_at, from_id = _position_params(from_position)
        params = {"queue": queue, "worker_id": worker_id, "limit": limit,
                  "token": secrets.token_urlsafe(24), "from_run_at": from_run_at, "from_id": from_id,
                  **_held_params(finished)}
        with self._single_statement() as conn:
            rows = (self._round_statement.rows(conn, params) if self._round_statement
                    else conn.execute(self._sql.complete_and_claim, params).all())
            claimed_rows = [row for row in rows if row.claimed]
            # Idle path only: an empty claim is classified and counted.
            empty_reason = (operations.count_empty_claim(self, conn, queue)
                            if limit and not claimed_rows else None)
        completed_rows = [row for row in rows if not row.claimed]
        self._emit_completed(completed_rows)
        completed = {row.id for row in completed_rows}
        results = {job.id: job.id in completed or self.complete(job.id, job.claim_token) for job in finished}
        jobs = sorted((_claimed_job(row) for row in claimed_rows), key=lambda j: j.id)
        if limit:
            self._emit_claimed(jobs, claimed_rows, queue, worker_id, limit, empty_reason)
        return results, jobs

    def _emit_claimed(self, jobs, rows, queue: str, worker_id: str, limit: int,
                      empty_reason: str | None = None) -> None:
        if not jobs:
            emit(self.plugin_manager, "sqla_queue_empty_claim",
                 event=EmptyClaim(queue=queue, worker_id=worker_id, limit=limit, reason=empty_reason))
            return
        run_at = {row.id: row.run_at for row in rows}
        emit_each(self.plugin_manager, "sqla_queue_job_claimed", (
            JobClaimed(job_id=job.id, queue=job.queue, task=job.task, attempt=job.attempts,
                       worker_id=worker_id, queue_wait=_queue_wait(job, run_at[job.id]))
            for job in jobs
        ))

    def complete(self, job_id: int, claim_token: str) -> bool:
        """Mark a claimed job completed. False means the claim was lost and nothing changed.

        Safe to call again with the same token after a lost reply: it reports True.
        """
        row = self._guarded(self._sql.complete, job_id, claim_token)
        if row is None:
            self._lost(job_id, claim_token, "complete")
            return False
        if not row.replayed:
            self._emit_completed([row])
        return True

    def complete_many(self, jobs: Iterable[ClaimedJob]) -> dict[int, bool]:
        """Complete many claimed jobs in one statement; ``{job id: completed?}``.

        Each row is still checked against its own token. A job the batch statement did not
        complete is settled on its own by `complete`, which recognises a replay (True) and
        reports a lost claim (False).
        """
        jobs = list(jobs)
        if not jobs:
            return {}
        with self._single_statement() as conn:
            rows = conn.execute(self._sql.complete_many, _held_params(jobs)).all()
        self._emit_completed(rows)
        done = {row.id for row in rows}
        return {job.id: job.id in done or self.complete(job.id, job.claim_token) for job in jobs}

    def _emit_completed(self, rows: Sequence[Any]) -> None:
        emit_each(self.plugin_manager, "sqla_queue_job_completed", (
            JobCompleted(job_id=row.id, queue=row.queue_name, task=row.task,
                         attempt=row.attempts, duration=row.duration)
            for row in rows
        ))

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
        when, wait = _validate.schedule(run_at, delay)
        trace = traceback_text(error)
        row = self._guarded(self._sql.retry, job_id, claim_token,
                            retry_at=when, delay=wait, error=error_text(error), traceback=trace)
        if row is None:
            self._lost(job_id, claim_token, "retry")
            return None
        return self._outcome(row, error, trace)

    def fail(self, job_id: int, claim_token: str, *, error: BaseException | str) -> bool:
        """Move a claimed job to terminal ``failed`` now. False means the claim was lost."""
        return self._fail(job_id, claim_token, error) is not None

    def _fail(self, job_id: int, claim_token: str, error: BaseException | str) -> Outcome | None:
        trace = traceback_text(error)
        row = self._guarded(self._sql.fail, job_id, claim_token, error=error_text(error), traceback=trace)
        if row is None:
            self._lost(job_id, claim_token, "fail")
            return None
        return self._outcome(row, error, trace)

    def handle_failure(self, job: ClaimedJob, error: BaseException) -> Outcome | None:
        """Retry or fail a job whose handler raised, as the strategy hooks decide.

        Non-retryable errors, a ``False`` delay, or exhausted attempts end in ``failed``. A
        strategy plugin that misbehaves is logged and the built-in defaults decide instead.
        """
        delay = failure_decision(self.plugin_manager, job, error)
        if delay is False:
            return self._fail(job.id, job.claim_token, error)
        return self.retry(job.id, job.claim_token, error=error, delay=delay)

    def _outcome(self, row: Any, error: BaseException | str, trace: str | None) -> Outcome:
        """The outcome of a retry or fail, and its event: the exception object (None for a
        string error) and the traceback text as stored."""
        outcome = Outcome(job_id=row.id, status=JobStatus(row.status), attempts=row.attempts,
                          max_attempts=row.max_attempts, run_at=row.run_at)
        if row.replayed:
            return outcome  # the first call's event already fired
        exception = None if isinstance(error, str) else error
        if outcome.status is JobStatus.PENDING:
            emit(self.plugin_manager, "sqla_queue_job_retried",
                 event=JobRetried(job_id=row.id, queue=row.queue_name, task=row.task,
                                  attempt=row.attempts, run_at=row.run_at, error=row.last_error or "",
                                  exception=exception, traceback=trace))
        else:
            emit(self.plugin_manager, "sqla_queue_job_failed",
                 event=JobFailed(job_id=row.id, queue=row.queue_name, task=row.task,
                                 attempt=row.attempts, error=row.last_error or "",
                                 exception=exception, traceback=trace))
        return outcome

    def _guarded(self, statement: Any, job_id: int, claim_token: str, **values: Any) -> Any:
        _check_claim(job_id, claim_token)
        params = {"job_id": job_id, "token": claim_token, **values}
        with self._transaction() as conn:
            row = conn.execute(statement, params).first()
            operations.count_retry(self, conn, row)  # a retry's counter commits with the retry
            return row

    def _lost(self, job_id: int, claim_token: str, operation: str, *, unless_finished: bool = False) -> None:
        with self._connection() as conn:
            state = conn.execute(self._sql.claim_state, {"job_id": job_id}).first()
        if unless_finished and state is not None and state.claim_token == claim_token:
            return  # finished under this very token: an outcome of this claim raced the caller
        emit(self.plugin_manager, "sqla_queue_lost_claim",
             event=LostClaim(job_id=job_id, claim_token=claim_token,
                             reason=_lost_reason(state), operation=operation))

    def heartbeat(self, jobs: Iterable[ClaimedJob]) -> set[int]:
        """Restart the lease of each job still held under its token; returns the renewed ids.

        A job missing from the result is a lost claim, reported through the lost-claim hook,
        unless its row was already finished under this same token: a worker's heartbeat races
        its own outcomes, and a job this claim completed (or retried, or failed) was not lost.
        """
        jobs = list(jobs)
        if not jobs:
            return set()
        with self._single_statement() as conn:
            rows = conn.execute(self._sql.renew, _held_params(jobs)).all()
        renewed = {row.id for row in rows}
        for job in jobs:
            if job.id not in renewed:
                self._lost(job.id, job.claim_token, "heartbeat", unless_finished=True)
        return renewed

    def release(self, jobs: Iterable[ClaimedJob]) -> list[int]:
        """Give unfinished jobs back (pending now, the interrupted attempt not counted)."""
        jobs = list(jobs)
        if not jobs:
            return []
        with self._single_statement() as conn:
            rows = conn.execute(self._sql.release, _held_params(jobs)).all()
        return sorted(row.id for row in rows)

    def worker(self, **options: Any) -> Worker:
        """A worker for this queue; options are `sqla_queue.worker.WorkerConfig`'s fields."""
        from .worker import Worker

        return Worker(self, **options)

    # -- recovery, reads -----------------------------------------------------------------

    def recover_expired(
        self, *, lease: timedelta | float = DEFAULT_LEASE, limit: int = DEFAULT_RECOVERY_LIMIT
    ) -> list[int]:
        """Take back running jobs whose lease (database time) expired; at most `limit` of each kind.

        Jobs with attempts left return to pending (``last_error = 'claim lease expired'``);
        jobs that expired on their last attempt go to failed. Returns the ids of both.
        """
        params = {"lease": _validate.duration(lease, "lease", positive=True),
                  "limit": _validate.positive_int(limit, "limit")}
        with self._transaction() as conn:
            requeued = conn.execute(self._sql.requeue_expired, params).all()
            operations.count_recovered(self, conn, requeued)
        with self._transaction() as conn:
            failed = conn.execute(self._sql.fail_expired, params).all()
            operations.count_recovered(self, conn, failed)
        for rows, status in ((requeued, JobStatus.PENDING), (failed, JobStatus.FAILED)):
            for row in rows:
                emit(self.plugin_manager, "sqla_queue_job_recovered",
                     event=JobRecovered(job_id=row.id, queue=row.queue_name, task=row.task, status=status))
        return sorted(row.id for row in (*requeued, *failed))

    def get_job(self, job_id: int) -> JobView | None:
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise InvalidInputError(f"job_id must be an integer, got {type(job_id).__name__}")
        with self._connection() as conn:
            row = conn.execute(self._sql.select_job, {"job_id": job_id}).first()
        return None if row is None else _job_view(row)

    def stats(self, *, window: timedelta | float = DEFAULT_STATS_WINDOW) -> QueueStats:
        """The health signals of every queue: active jobs now, finished jobs and counted events
        within `window` (default 15 minutes). See docs/how-to/operations.md."""
        return operations.queue_stats(self, window)

    # -- operator actions (sqla_queue.operations, sqla_queue.maintenance) ------------------

    def list_jobs(
        self,
        *,
        status: JobStatus | str | None = None,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> JobPage:
        """A page of jobs, newest first; pass ``before_id=page.next_before`` for the next."""
        return operations.list_jobs(self, status=status, queue_name=queue, task=task,
                                    limit=limit, before_id=before_id)

    def retry_now(self, job_id: int) -> JobView:
        """Make a failed job pending and due now, with at least one attempt left."""
        return operations.retry_now(self, job_id)

    def cancel(self, job_id: int) -> JobView:
        """Delete a pending job that no transaction holds; returns its last state."""
        return operations.cancel(self, job_id)

    def prune(self, **options: Any) -> maintenance.PruneResult:
        """Delete finished jobs older than ``completed_after`` / ``failed_after`` in batches
        until caught up; options are `sqla_queue.maintenance.PruneConfig`'s fields."""
        return maintenance.prune(self, **options)

    # -- self-fencing ----------------------------------------------------------------------

    def report_fenced(self, job: ClaimedJob, reason: str) -> None:
        """Report a claim its worker gave up without the database saying so (its lease could
        not be renewed, or its outcome not recorded, before the lease expired): the worker
        stops treating the job as its own, since recovery may hand it to someone else. The
        lost-claim event (operation ``"fence"``) is built here like every other one, so
        plugins see one shape whoever noticed the loss."""
        from ._plugins import emit
        from .types import LostClaim

        emit(self.plugin_manager, "sqla_queue_lost_claim",
             event=LostClaim(job_id=job.id, claim_token=job.claim_token, reason=reason, operation="fence"))


# -- row mapping -------------------------------------------------------------------------


def _table_of(model: type) -> Table:
    table = getattr(model, "__table__", None)
    if not isinstance(table, Table) or "claim_token" not in table.c:
        raise ConfigurationError(
            f"model must be a mapped class built on sqla_queue.JobMixin, got {model!r}"
        )
    return table


def _check_claim(job_id: Any, claim_token: Any) -> None:
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        raise InvalidInputError(f"job_id must be an integer, got {type(job_id).__name__}")
    if not isinstance(claim_token, str) or not claim_token:
        raise InvalidInputError("claim_token must be the non-empty string a claim returned")


def _held_params(jobs: Sequence[ClaimedJob]) -> dict[str, list[Any]]:
    """Sorted by id, so that two batch statements on overlapping jobs (a heartbeat and a
    completion from one worker) lock rows in the same order and cannot deadlock."""
    ordered = sorted(jobs, key=lambda job: job.id)
    return {"job_ids": [job.id for job in ordered], "tokens": [job.claim_token for job in ordered]}


def _claimed_job(row: Any) -> ClaimedJob:
    return ClaimedJob(
        id=row.id, task=row.task, payload=row.payload, attempts=row.attempts,
        max_attempts=row.max_attempts, claim_token=row.claim_token, queue=row.queue_name,
        idempotency_key=row.idempotency_key, locked_at=row.locked_at, run_at=row.run_at,
    )


def _position_params(position: Any) -> tuple[datetime | None, int | None]:
    if position is None:
        return None, None
    if (not isinstance(position, tuple) or len(position) != 2
            or not isinstance(position[0], datetime) or position[0].tzinfo is None
            or isinstance(position[1], bool) or not isinstance(position[1], int)):
        raise InvalidInputError(
            "from_position must be None or a (run_at, id) tuple of an aware datetime and an integer"
        )
    return position


def claim_position(jobs: Sequence[ClaimedJob]) -> tuple[datetime, int] | None:
    """Where a claim that returned `jobs` got to in claim order: the earliest of them.

    Every pending job before it was claimed or skipped (locked) by some claim, so the next
    claim can start there (`Queue.complete_and_claim`'s ``from_position``)."""
    return min(((job.run_at, job.id) for job in jobs if job.run_at is not None), default=None)


def _queue_wait(job: ClaimedJob, run_at: datetime | None) -> timedelta | None:
    """From due to claimed: how long the job waited for a worker."""
    return job.locked_at - run_at if job.locked_at and run_at else None


def _job_view(row: Any) -> JobView:
    return JobView(
        id=row.id, task=row.task, queue=row.queue_name, status=JobStatus(row.status),
        payload=row.payload, attempts=row.attempts, max_attempts=row.max_attempts,
        run_at=row.run_at, created_at=row.created_at, locked_at=row.locked_at,
        locked_by=row.locked_by, completed_at=row.completed_at, failed_at=row.failed_at,
        last_error=row.last_error,
        idempotency_key=row.idempotency_key, last_traceback=row.last_traceback,
    )


def _lost_reason(state: Any) -> str:
    if state is None:
        return "job no longer exists"
    if state.status == JobStatus.RUNNING.value:
        return "job was claimed again under another token"
    if state.claim_token is None and state.last_error and "lease expired" in state.last_error:
        return f"claim lease expired and the job was recovered (now {state.status})"
    return f"job is {state.status} under another claim"
