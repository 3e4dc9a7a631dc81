"""Plain value types of the public API: the job states and frozen dataclasses. Nothing here
touches the database; `queue.py` builds these from result rows."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ._batches import BatchCommitted  # noqa: F401  (re-exported: a lifecycle event payload)
from .queue_state import DEFAULT_STATS_WINDOW, LimitOptions, QueueLimits, QueueState, Rate  # noqa: F401  (API types)
from .states import ACTIVE, FINISHED_STATUSES, JobStatus  # noqa: F401  (re-exported: the value types of the API)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

    from ._batches import BatchStatus, WorkflowReads
    from .errors import Snooze
    from .events import (  # noqa: F401  (re-exported on first use: `__getattr__`)
        EmptyClaim,
        JobCancelled,
        JobClaimed,
        JobCompleted,
        JobEnqueued,
        JobFailed,
        JobRecovered,
        JobRetried,
        JobSnoozed,
        LostClaim,
    )


T = TypeVar("T")


class HandlerTransaction(Protocol):
    """What ``ctx.transaction()`` returns (`sqla_queue.core.handler_transaction` builds it): a
    block whose writes commit with the job's completion, as ``with`` (a `Session`) or
    ``async with`` (an `AsyncSession`)."""

    def __enter__(self) -> Session: ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool: ...
    async def __aenter__(self) -> AsyncSession: ...
    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool: ...
    def set_result(self, value: Any) -> None: ...


class CancelSignal(Protocol):
    """What tells a run that someone asked to cancel its job (`JobContext.cancel_requested`
    reads it): a `threading.Event`, or the worker's per-job flag, which costs no lock."""

    def is_set(self) -> bool: ...


# Short is safe: a live worker renews its jobs' leases (every lease/3), and every outcome is
# fenced by the claim token. The lease bounds how long a crashed worker's jobs wait.
DEFAULT_LEASE = timedelta(seconds=60)
"""How long a claim stays valid without renewal: workers and `recover_expired` share it."""

ACTIVE_STATUSES = ACTIVE
"""States in which an idempotency key is held (the dedupe window): `states.ACTIVE`."""

def built(cls: type[T], fields: dict[str, Any]) -> T:
    """An instance of frozen dataclass `cls` with `fields` (every one of its fields, by name),
    made without the generated ``__init__``, which sets each field through
    ``object.__setattr__``: a worker makes a `ClaimedJob` and a `JobContext` for every job, and
    that cost about 4 µs of its 30-odd per job. Only for values the caller has already made
    right; tests/test_types.py checks that every field is given."""
    instance = object.__new__(cls)
    instance.__dict__.update(fields)
    return instance


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
    run_at: datetime | None = None  # when it became due
    priority: int = 0
    scheduled_at: datetime | None = None  # the periodic tick it was enqueued for
    snoozes: int = 0
    meta: dict[str, Any] | None = None  # what enqueue hooks (or ``meta=``) stored with the job
    start_after: float = 0.0  # seconds after the claim at which its queue's rate lets it start

    @classmethod
    def from_row(cls, row: Any) -> ClaimedJob:
        """A claim statement's returned row (`sql.claim_jobs`, `sql.claim_job_by_id`, the
        round's claimed rows), by attribute."""
        return built(cls, {
            "id": row.id, "task": row.task, "payload": row.payload, "attempts": row.attempts,
            "max_attempts": row.max_attempts, "claim_token": row.claim_token, "queue": row.queue_name,
            "idempotency_key": row.idempotency_key, "locked_at": row.locked_at, "run_at": row.run_at,
            "priority": row.priority, "scheduled_at": row.scheduled_at, "snoozes": row.snoozes, "meta": row.meta,
            "start_after": 0.0,
        })

    @property
    def is_last_attempt(self) -> bool:
        return self.attempts >= self.max_attempts

    def context(self, cancel_requested: CancelSignal | None = None,
                transaction: Callable[[], HandlerTransaction] | None = None, *, is_async: bool = False,
                dependency_results: WorkflowReads | None = None) -> JobContext:
        """The handler's view of this run. Without an explicit key, the idempotency key is
        derived from the job id, which every attempt shares. `cancel_requested` is the event
        its worker sets when someone asks to cancel the job (`JobContext.cancel_requested`: a
        `threading.Event` or anything else with ``is_set()``); `transaction` gives what
        ``ctx.transaction()`` returns (made on first use: most handlers never ask); `is_async`,
        whether the handler is ``async def``; `dependency_results` reads ``ctx.dependency_results``
        and ``ctx.batch``."""
        return built(JobContext, {
            "job_id": self.id, "attempt": self.attempts, "max_attempts": self.max_attempts, "queue": self.queue,
            "task": self.task, "idempotency_key": self.idempotency_key or f"sqla_queue-job-{self.id}",
            "claim_token": self.claim_token, "priority": self.priority, "scheduled_at": self.scheduled_at,
            "meta": MappingProxyType(self.meta or {}), "is_async": is_async,
            "_cancel_requested": threading.Event() if cancel_requested is None else cancel_requested,
            "_transaction": transaction, "_dependency_results": dependency_results,
        })


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
    priority: int = 0
    scheduled_at: datetime | None = None
    """The tick of the schedule this job was enqueued for (`Queue.periodic`); None otherwise."""
    meta: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """What was stored with the job when it was enqueued (``enqueue(meta=...)`` and the
    `sqla_queue_job_meta` hooks: a trace context, a tenant), read-only, the same on every attempt."""
    is_async: bool = False
    """The handler is an ``async def`` one (what run middleware needs to know)."""
    _cancel_requested: CancelSignal = field(default_factory=threading.Event, repr=False, compare=False)
    _transaction: Callable[[], HandlerTransaction] | None = field(default=None, repr=False, compare=False)
    _dependency_results: WorkflowReads | None = field(default=None, repr=False, compare=False)

    @property
    def dependency_results(self) -> Mapping[int, Any]:
        """The results of the jobs this one depends on (``depends_on=``), by id: one query each
        time it is read, so keep it in a variable. Empty for a job without dependencies."""
        return MappingProxyType(dict(self._dependency_results.results(self.job_id) if self._dependency_results else {}))

    @property
    def batch(self) -> BatchStatus | None:
        """In a batch's callback (`Queue.batch`): its id and its jobs' counts by status (one
        query each read); None for a job that depends on no job."""
        return self._dependency_results.batch(self.job_id) if self._dependency_results else None

    @property
    def cancel_requested(self) -> bool:
        """True once someone asked to cancel this job (`Queue.cancel`); the worker learns it
        at its next lease renewal. Check it between steps of long work and return early: the
        job ends ``cancelled`` whatever the handler does next, and is never retried."""
        return self._cancel_requested.is_set()

    def transaction(self) -> HandlerTransaction:
        """``with ctx.transaction() as session:`` (``async with`` in an async handler, an
        `AsyncSession`): what the block writes and this job's completion commit in one
        transaction, or not at all. If the claim is no longer this run's (its lease was
        recovered, another worker holds the job), nothing commits and `LostClaimError` is
        raised; if someone asked to cancel the job, `JobCancelledError`. Once per run; the
        session is the task's ``session_factory``'s, else one on the queue's engine
        (docs/explanation/delivery-semantics.md)."""
        if self._transaction is None:
            raise RuntimeError("ctx.transaction() needs the context a worker (or sqla_queue.testing's drain, "
                               "run_job or inline mode) gives the handler: this JobContext was built by hand")
        return self._transaction()

    def set_result(self, value: Any) -> None:
        """Inside ``ctx.transaction()``: the job's result, stored with the completion that
        block commits (the handler's return value comes after that commit)."""
        self.transaction().set_result(value)

    def snooze(self, delay: timedelta | float) -> Snooze:
        """``return ctx.snooze(delay)``: run this job again after `delay` without spending an
        attempt (the same as ``raise Snooze(delay)``)."""
        from .errors import Snooze
        return Snooze(delay)


@dataclass(frozen=True)
class Outcome:
    """Where a retried (or replayed) job ended up: pending again at `run_at`, or failed."""

    job_id: int
    status: JobStatus
    attempts: int
    max_attempts: int
    run_at: datetime


_EVENTS = frozenset({"EmptyClaim", "JobCancelled", "JobClaimed", "JobCompleted", "JobEnqueued", "JobFailed",
                     "JobRecovered", "JobRetried", "JobSnoozed", "LostClaim"})
"""The lifecycle event payloads (`sqla_queue.events`): a worker builds its first event after its
first round has committed."""
_REPORTS = frozenset({"BulkResult", "HistoryPoint", "JobPage", "JobView", "QueueHealth", "QueueStats", "WorkerInfo",
                      "WorkerSeen"})
"""What the operator reads return (`sqla_queue.reports`): a worker never builds one."""


def __getattr__(name: str) -> Any:
    """The event payloads and the operator reads' types, re-exported here on first use: no part
    of a worker's start-up (eighteen frozen dataclasses, some 11 ms of it)."""
    if name in _EVENTS:
        from . import events as home
    elif name in _REPORTS:
        from . import reports as home  # type: ignore[no-redef]
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = getattr(home, name)
    return value
