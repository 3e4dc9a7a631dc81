"""Plain value types of the public API: the job states and frozen dataclasses.

Nothing here touches the database; `queue.py` builds these from result rows.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any


class JobStatus(str, enum.Enum):
    """The four states of a job (see docs/explanation/state-machine.md)."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


# Short is safe: a live worker renews its jobs' leases (every lease/3), and every outcome is
# fenced by the claim token. The lease bounds how long a crashed worker's jobs wait.
DEFAULT_LEASE = timedelta(seconds=60)
"""How long a claim stays valid without renewal: workers and `recover_expired` share it."""

ACTIVE_STATUSES = (JobStatus.PENDING, JobStatus.RUNNING)
"""States in which an idempotency key is held (the dedupe window)."""


@dataclass(frozen=True)
class ClaimedJob:
    """A job this worker now owns until its lease expires or it records an outcome."""

    id: int
    task: str
    payload: dict[str, Any]
    attempts: int
    max_attempts: int
    claim_token: str
    queue: str
    idempotency_key: str | None = None
    locked_at: datetime | None = None

    @property
    def is_last_attempt(self) -> bool:
        return self.attempts >= self.max_attempts

    def context(self) -> JobContext:
        """The handler's view of this run. Without an explicit key, the idempotency key is
        derived from the job id, which every attempt shares."""
        return JobContext(
            job_id=self.id, attempt=self.attempts, max_attempts=self.max_attempts,
            queue=self.queue, task=self.task,
            idempotency_key=self.idempotency_key or f"sqla_queue-job-{self.id}",
            claim_token=self.claim_token,
        )


@dataclass(frozen=True)
class JobContext:
    """What a handler learns about the run it is part of.

    `idempotency_key` is stable across every attempt of the job: pass it to downstream systems
    (for example as an HTTP ``Idempotency-Key`` header), because delivery is at-least-once.
    """

    job_id: int
    attempt: int
    max_attempts: int
    queue: str
    task: str
    idempotency_key: str
    claim_token: str


@dataclass(frozen=True)
class Outcome:
    """Where a retried (or replayed) job ended up: pending again at `run_at`, or failed."""

    job_id: int
    status: JobStatus
    attempts: int
    max_attempts: int
    run_at: datetime


@dataclass(frozen=True)
class JobView:
    """A read-only snapshot of one job row."""

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


@dataclass(frozen=True)
class QueueHealth:
    """Health signals of one queue at one moment (database time)."""

    queue: str
    pending: int = 0
    running: int = 0
    completed: int = 0
    failed: int = 0
    eligible: int = 0
    scheduled: int = 0
    oldest_eligible_age: timedelta | None = None
    near_max_attempts: int = 0


@dataclass(frozen=True)
class QueueStats:
    """Health signals for every queue that has jobs, keyed by queue name."""

    queues: dict[str, QueueHealth] = field(default_factory=dict)

    def __getitem__(self, queue: str) -> QueueHealth:
        return self.queues.get(queue, QueueHealth(queue=queue))

    def __iter__(self):
        return iter(self.queues.values())


@dataclass(frozen=True)
class RecoveryResult:
    """One recovery pass: jobs returned to pending, and jobs failed on their last attempt."""

    requeued: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)

    @property
    def ids(self) -> list[int]:
        return [*self.requeued, *self.failed]


# Lifecycle event payloads, one per hook (see docs/reference/events.md).


@dataclass(frozen=True)
class JobEnqueued:
    job_id: int
    queue: str
    task: str
    deduplicated: bool


@dataclass(frozen=True)
class JobClaimed:
    job_id: int
    queue: str
    task: str
    attempt: int
    worker_id: str
    queue_wait: timedelta | None


@dataclass(frozen=True)
class JobCompleted:
    job_id: int
    queue: str
    task: str
    attempt: int
    duration: timedelta | None


@dataclass(frozen=True)
class JobRetried:
    job_id: int
    queue: str
    task: str
    attempt: int
    run_at: datetime
    error: str


@dataclass(frozen=True)
class JobFailed:
    job_id: int
    queue: str
    task: str
    attempt: int
    error: str


@dataclass(frozen=True)
class JobRecovered:
    job_id: int
    queue: str
    task: str
    status: JobStatus


@dataclass(frozen=True)
class LostClaim:
    job_id: int
    claim_token: str
    reason: str
    operation: str


@dataclass(frozen=True)
class EmptyClaim:
    queue: str
    worker_id: str
    limit: int
