"""The lifecycle event payloads, one per hook (docs/reference/events.md): what a plugin's
``sqla_queue_job_*`` implementation receives. `sqla_queue.types` re-exports them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from .states import JobStatus

# `exception` (on JobRetried and JobFailed) is the live exception object, for in-process
# plugins such as error reporters. It is left out of repr() and equality: its message may quote
# the payload, and two events are the same outcome whatever object raised them.


@dataclass(frozen=True)
class JobEnqueued:
    job_id: int
    queue: str
    task: str
    deduplicated: bool
    meta: dict[str, Any] | None = field(default=None, compare=False)  # what the enqueue stored


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
    exception: BaseException | None = field(default=None, repr=False, compare=False)
    traceback: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class JobFailed:
    job_id: int
    queue: str
    task: str
    attempt: int
    error: str
    exception: BaseException | None = field(default=None, repr=False, compare=False)
    traceback: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class JobCancelled:
    """`requested_while_running`: the job was running when the cancel came and its worker
    ended it; False when a pending job was cancelled on the spot."""

    job_id: int
    queue: str
    task: str
    attempt: int
    requested_while_running: bool


@dataclass(frozen=True)
class JobSnoozed:
    """The job is pending again at `run_at`; `snoozes` counts its snoozes so far."""

    job_id: int
    queue: str
    task: str
    attempt: int
    run_at: datetime
    snoozes: int


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
    """`reason` says why nothing was claimed although jobs were pending (``"empty_locked"``,
    ``"empty_scheduled"``, ``"empty_exhausted"``, ``"empty_other_queue"``); None when no job
    was pending at all."""

    queue: str
    worker_id: str
    limit: int
    reason: str | None = None
