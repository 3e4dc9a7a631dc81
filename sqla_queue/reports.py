"""What the operator reads return: a job's row (`JobView`), a page of jobs, queue health and
stats, the dashboard's time series and worker lists, a bulk action's result. Frozen dataclasses
built from result rows; `sqla_queue.types` and the package re-export them on first use, so the
processes that never read them (a worker, an enqueuing web request) never build their classes."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from .queue_state import DEFAULT_STATS_WINDOW, QueueLimits
from .states import JobStatus


@dataclass(frozen=True)
class JobView:
    """A read-only snapshot of one job row.

    `last_traceback` is where the attempt that set `last_error` raised: frames (file, line,
    function, source line) and the same one-line error, sanitized and at most
    ``sqla_queue._sanitize.MAX_TRACEBACK_LENGTH`` characters. None when the error was recorded
    as a string, and cleared with `last_error` by the next claim.
    """

    id: int
    task: str
    queue: str
    status: JobStatus
    payload: dict[str, Any]
    attempts: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    locked_at: datetime | None
    locked_by: str | None
    completed_at: datetime | None
    failed_at: datetime | None
    last_error: str | None
    idempotency_key: str | None
    last_traceback: str | None = None
    priority: int = 0
    snoozes: int = 0
    scheduled_at: datetime | None = None
    cancel_requested_at: datetime | None = None
    cancelled_at: datetime | None = None
    result: Any = None
    """The handler's return value as stored (JSON), when it returned one and completed."""
    meta: dict[str, Any] | None = None
    """What was stored with the job when it was enqueued (`JobContext.meta`)."""
    group_key: str | None = None
    """The job's group (``enqueue(group_key=)``): the queue's per-key limits apply to it."""


@dataclass(frozen=True)
class QueueHealth:
    """Health signals of one queue at one moment (database time); see docs/how-to/operations.md.

    Now: `pending`, `running`, `waiting` (for dependencies), `eligible` (due, attempts left), `scheduled` (due later),
    `oldest_eligible_age`, `near_max_attempts` (pending or running on or one before their last
    attempt). Within the stats window: `completed` and `failed` (terminal) jobs, the
    claim-to-completion durations of the completed ones (``None`` when none completed),
    `retried` attempts, `lease_recoveries` (running jobs taken back after their lease expired)
    and ``empty_claims_*``: claims on this queue that returned nothing while jobs were pending,
    by reason (due jobs were locked, all due later, none with attempts left, only in other
    queues). Finished counts cover the window only: counting every finished job ever kept would
    read the whole table. `throttled`: claims in the window that a limit held back while due jobs
    waited (not empty claims); `limits`: the queue's limits (None: unlimited).
    """

    queue: str
    pending: int = 0
    running: int = 0
    waiting: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    paused: bool = False
    eligible: int = 0
    scheduled: int = 0
    oldest_eligible_age: timedelta | None = None
    near_max_attempts: int = 0
    retried: int = 0
    lease_recoveries: int = 0
    duration_p50: timedelta | None = None
    duration_p95: timedelta | None = None
    duration_max: timedelta | None = None
    empty_claims_locked: int = 0
    empty_claims_scheduled: int = 0
    empty_claims_exhausted: int = 0
    empty_claims_other_queue: int = 0
    throttled: int = 0
    limits: QueueLimits | None = None

    @property
    def empty_claims(self) -> int:
        """Claims that returned nothing while jobs were pending, whatever the reason."""
        return (self.empty_claims_locked + self.empty_claims_scheduled
                + self.empty_claims_exhausted + self.empty_claims_other_queue)


@dataclass(frozen=True)
class QueueStats:
    """Health signals for every queue that has jobs, keyed by queue name.

    A queue is listed when it has active jobs or jobs that finished in the window. `idle` holds
    the other queues that workers claimed from in the window while jobs were pending elsewhere:
    a worker polling a queue nobody enqueues to shows up there, its ``empty_claims_other_queue``
    saying that the jobs are in another queue. `window` is the look-back of the windowed signals
    and `measured_at` the database time they end at.
    """

    queues: dict[str, QueueHealth] = field(default_factory=dict)
    idle: dict[str, QueueHealth] = field(default_factory=dict)
    window: timedelta = DEFAULT_STATS_WINDOW
    measured_at: datetime | None = None

    def __getitem__(self, queue: str) -> QueueHealth:
        found = self.queues.get(queue) or self.idle.get(queue)
        return found if found is not None else QueueHealth(queue=queue)

    def __iter__(self):
        return iter(self.queues.values())


@dataclass(frozen=True)
class JobPage:
    """One page of `Queue.list_jobs`, newest first. `next_before` is the ``before_id`` that
    fetches the next page, or None on the last one."""

    jobs: list[JobView] = field(default_factory=list)
    next_before: int | None = None


# Time series and operator views behind the web dashboard (docs/how-to/dashboard.md).


@dataclass(frozen=True)
class HistoryPoint:
    """One minute of one queue as the worker sampled it (`Queue.history`).

    Backlog fields are the queue's state when the sample was taken; `completed`, `failed`,
    `retried` and `empty_claims` count that minute; durations are claim-to-completion of the
    jobs that completed in it (None when none did).
    """

    at: datetime
    queue: str
    pending: int = 0
    eligible: int = 0
    scheduled: int = 0
    running: int = 0
    oldest_eligible_age: timedelta | None = None
    completed: int = 0
    failed: int = 0
    retried: int = 0
    empty_claims: int = 0
    duration_p50: timedelta | None = None
    duration_p95: timedelta | None = None


@dataclass(frozen=True)
class WorkerSeen:
    """A worker that held or finished a job recently (`Queue.workers_seen`), by its claims'
    ``locked_by``: the jobs it runs now and when it last claimed or renewed a lease."""

    worker_id: str
    last_seen: datetime
    queues: tuple[str, ...] = ()
    running_job_ids: tuple[int, ...] = ()
    finished_recently: int = 0


@dataclass(frozen=True)
class WorkerInfo:
    """A worker process in the worker registry (`Queue.workers`): what it said at its last beat.
    Not `alive` once `expires_at` (last heartbeat plus its lease) passed: it died without a
    clean exit. `state` is what it wrote (``running``, ``stopping`` while it drains); `status`
    is ``dead`` for a worker that is not alive, else its state (docs/reference/api.md)."""

    worker_id: str
    host: str
    pid: int
    version: str
    queues: tuple[str, ...]
    tasks: tuple[str, ...]
    concurrency: int
    state: str
    started_at: datetime
    heartbeat_at: datetime
    expires_at: datetime
    alive: bool
    status: str
    running_job_ids: tuple[int, ...] = ()
    measured_at: datetime | None = None


@dataclass(frozen=True)
class BulkResult:
    """What a bulk operator action (`Queue.retry_jobs`, `Queue.cancel_jobs`) changed: the ids
    of the jobs it changed, and how many matching jobs it left alone (held by another
    transaction, or beyond `limit`). For a cancel, `cancel_requested` names the changed jobs
    that were running: they only got a request their worker passes on; the others ended
    cancelled."""

    action: str
    changed: tuple[int, ...] = ()
    skipped: int = 0
    cancel_requested: tuple[int, ...] = ()

    @property
    def count(self) -> int:
        return len(self.changed)
