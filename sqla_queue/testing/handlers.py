"""Testing an application's own handlers on real PostgreSQL: run due jobs in the test's thread,
look for enqueued jobs, run one handler with a real context.

::

    import sqla_queue as sq

    def test_an_order_is_mailed(queue):
        place_order(...)                                  # enqueues send_receipt
        assert sq.testing.enqueued(queue, "send_receipt", payload={"order_id": 1})
        [ran] = sq.testing.drain(queue)                   # runs it, as a worker would
        assert ran.outcome == "completed"

Each helper runs the production code: jobs are claimed by the claim statements, run by the
worker's own run of a claimed job (`JobContext`, ``ctx.transaction()``, retries and their
delays, snoozes, cancel requests, the fenced outcome, plugins' events), and their outcomes are
recorded as a worker would. Nothing is mocked and no clock is patched: `drain`'s ``advance``
moves due times back in the database instead. They read and write committed data, so they
suit a database of the test's own (the ``sqla_queue_database_url`` fixture), not a rolled-back
connection. docs/how-to/test-your-handlers.md shows them at work.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from ..core.operations import job_view
from ..errors import ConfigurationError, InvalidInputError, SqlaQueueError
from ..reports import JobView
from ..types import ClaimedJob
from ..worker.job_run import Ran, run_claimed_job

if TYPE_CHECKING:
    from ..queue import Queue

__all__ = ["DEFAULT_MAX_JOBS", "DrainLimitError", "Enqueued", "Ran", "claim_one", "drain", "drain_async", "enqueued",
           "run_job"]

DEFAULT_MAX_JOBS = 1000
"""How many jobs one `drain` runs before it decides a job keeps re-enqueueing itself."""

WORKER_ID = f"sqla_queue.testing:{os.getpid()}"
"""What the helpers record as ``locked_by`` of the jobs they claim."""

RUN_JOB_CONTEXT = ("attempt", "max_attempts", "priority", "queue", "idempotency_key", "scheduled_at")
"""The parts of a job's context `run_job` lets a test choose."""

_SHOWN = 10  # jobs an `Enqueued` lists in its repr
_BEGINNING = datetime(1, 1, 1, tzinfo=timezone.utc)


class DrainLimitError(SqlaQueueError, AssertionError):
    """`drain` ran its ``max_jobs`` and jobs were still due: a handler that enqueues (or
    snoozes, or retries) its own job forever, or a drain asked for too little. ``ran`` holds
    what did run. An AssertionError, so pytest reports it as a failed test."""

    def __init__(self, message: str, ran: list[Any]) -> None:
        super().__init__(message)
        self.ran = ran


# -- enqueued ------------------------------------------------------------------------------


class Enqueued(list):
    """The pending jobs that matched (`JobView`s, oldest first), which `enqueued` returns: a
    list, true when something matched. Its repr says what was searched for and, when nothing
    matched, which jobs are pending instead, so that a failed ``assert enqueued(...)`` reads
    as an explanation."""

    def __init__(self, jobs: Iterable[JobView], searched: str, pending: list[JobView],
                 more_pending: bool, now: datetime) -> None:
        super().__init__(jobs)
        self.searched = searched
        """What was asked for, in words."""
        self.pending = pending
        """When nothing matched: the first pending jobs of any kind (empty otherwise)."""
        self._more_pending = more_pending
        self._now = now

    def __repr__(self) -> str:
        if self:
            shown = "; ".join(_describe(job, self._now) for job in self[:_SHOWN])
            more = f"; and {len(self) - _SHOWN} more" if len(self) > _SHOWN else ""
            return f"<{len(self)} pending {_plural(len(self))} {self.searched}: {shown}{more}>"
        if not self.pending:
            return f"<no pending job {self.searched}; no job is pending at all>"
        shown = "; ".join(_describe(job, self._now) for job in self.pending)
        more = "; and more" if self._more_pending else ""
        count = f"{len(self.pending)}+" if self._more_pending else str(len(self.pending))
        return f"<no pending job {self.searched}; pending instead ({count}): {shown}{more}>"

    __str__ = __repr__


def enqueued(queue: Queue, task: Any = None, *, payload: Mapping[str, Any] | None = None,
             queue_name: str | None = None) -> Enqueued:
    """The pending jobs of `queue`'s table that match, oldest first: of `task` (a name, the
    `Task` or its handler; None: any), in queue `queue_name` (None: any), whose payload
    contains `payload` (every key given, with that value; nested mappings the same way, as
    PostgreSQL's JSONB ``@>``; None: any).

    An `Enqueued`: ``assert enqueued(queue, "send_receipt", payload={"order_id": 7})`` fails
    with a message naming what was looked for and what is pending instead. Reads committed
    jobs. An unknown task is an `UnknownTaskError`; a payload that is not a JSON mapping, or a
    blank queue name, an `InvalidInputError`.
    """
    task_name = None if task is None else queue.get_task(task).name
    if payload is not None and not isinstance(payload, Mapping):
        raise InvalidInputError(f"payload must be a mapping (the keys the job's payload must contain), "
                                f"got {type(payload).__name__}")
    if queue_name is not None and (not isinstance(queue_name, str) or not queue_name.strip()):
        raise InvalidInputError(f"queue_name must be a queue's name, got {queue_name!r}")
    if payload is not None:
        try:
            payload = json.loads(json.dumps(payload, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"payload cannot be compared as JSON: {exc}") from None
    statements = queue.core.statements
    params: dict[str, Any] = {"limit": None}
    if task_name is not None:
        params["task"] = task_name
    if queue_name is not None:
        params["queue"] = queue_name
    if payload is not None:
        params["payload"] = payload
    search = statements.pending_jobs(task_name is not None, queue_name is not None, payload is not None)
    with queue.core.executor.transaction() as conn:
        now = conn.execute(statements.now).scalar_one()
        found = [job_view(row) for row in conn.execute(search, params)]
        others = [] if found else [job_view(row) for row in
                                   conn.execute(statements.pending_jobs(False, False, False), {"limit": _SHOWN + 1})]
    return Enqueued(found, _searched(task_name, queue_name, payload), others[:_SHOWN],
                    len(others) > _SHOWN, now)


def _searched(task: str | None, queue_name: str | None, payload: Mapping[str, Any] | None) -> str:
    words = [f"of task {task!r}" if task else "of any task"]
    if queue_name is not None:
        words.append(f"in queue {queue_name!r}")
    if payload is not None:
        words.append(f"with payload containing {_json(payload)}")
    return " ".join(words)


def _describe(job: JobView, now: datetime) -> str:
    """One job in a few words, what matters first (pytest shortens a long repr in the middle)."""
    words = f"#{job.id} {job.task} {_json(job.payload)} in {job.queue!r}"
    if job.run_at > now:
        words += f", due in {_duration(job.run_at - now)}"
    if job.attempts:
        words += f", {job.attempts} of {job.max_attempts} attempts made"
    return words


def _duration(delta: timedelta) -> str:
    seconds = max(int(delta.total_seconds()), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02}:{seconds:02}" if hours else f"{minutes}:{seconds:02}"


def _json(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 120 else f"{text[:117]}..."


def _plural(count: int) -> str:
    return "job" if count == 1 else "jobs"


# -- drain ---------------------------------------------------------------------------------


def drain(queue: Queue, *, queues: Iterable[str] | None = None, advance: timedelta | float = timedelta(0),
          until_empty: bool = True, max_jobs: int = DEFAULT_MAX_JOBS) -> list[Ran]:
    """Run `queue`'s due jobs one at a time in the calling thread, as a worker would, and
    return what ran (`Ran`: the job, its ``outcome`` -- ``"completed"``, ``"retried"``,
    ``"failed"``, ``"cancelled"``, ``"snoozed"`` or ``"lost"`` -- its result and error), in the
    order they ran.

    :param queues: the queue names to drain. Default: every queue holding pending jobs of
        `queue`'s registered tasks, looked up again before each claim (so a queue a handler
        enqueues into is drained too). Jobs run one at a time in claim order across these
        queues: highest priority first, then by due time.
    :param advance: time travel (a timedelta or seconds): before each claim, pending jobs due
        within `advance` from now (database time) are moved back by `advance`, each job once,
        so a delayed job, or a retry or snooze that falls within it, runs now, and jobs still
        run in the order of their original due times. Jobs due later than that wait.
    :param until_empty: True runs until no job is due, including the jobs the drained ones
        enqueue, retry or snooze. False runs one pass: only the jobs due when the drain began
        (after the time travel), each once.
    :param max_jobs: run at most this many jobs; a drain that would run more raises
        `DrainLimitError` (a handler that keeps enqueueing its own job).

    A handler's exception is recorded as the job's outcome (retried or failed), not raised:
    look at the returned outcomes. An ``async def`` handler runs in `asyncio.run`; from
    asyncio code use `drain_async`.
    """
    return _drain(queue, queues, advance, until_empty, max_jobs, asyncio.run)


async def drain_async(queue: Queue, *, queues: Iterable[str] | None = None,
                      advance: timedelta | float = timedelta(0), until_empty: bool = True,
                      max_jobs: int = DEFAULT_MAX_JOBS) -> list[Ran]:
    """`drain` for asyncio tests: the drain runs in a thread while the event loop stays free,
    and each ``async def`` handler runs on the caller's event loop, where the test's own async
    engines and sessions live."""
    loop = asyncio.get_running_loop()

    def await_on_loop(coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()

    return await asyncio.to_thread(_drain, queue, queues, advance, until_empty, max_jobs, await_on_loop)


def _drain(queue: Queue, queues: Iterable[str] | None, advance: timedelta | float, until_empty: bool,
           max_jobs: int, await_coroutine: Callable[[Any], Any]) -> list[Ran]:
    _check_runnable(queue, "drain")
    chosen = _queue_names(queues)
    advance = _advance(advance)
    if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1:
        raise InvalidInputError(f"max_jobs must be a positive int, got {max_jobs!r}")
    if not isinstance(until_empty, bool):
        raise InvalidInputError(f"until_empty must be True or False, got {until_empty!r}")
    executor = queue.core.executor
    ran: list[Ran] = []
    travel = _TimeTravel(queue, advance)
    if not until_empty:
        names = chosen if chosen is not None else _default_queues(queue)
        travel(names)
        with executor.connection() as conn:
            due = conn.execute(executor.statements.due_jobs, {"queues": names, "limit": None}).scalars().all()
        if len(due) > max_jobs:
            raise DrainLimitError(f"{len(due)} jobs are due, more than max_jobs={max_jobs}", ran)
        for job_id in due:
            job = claim_one(queue, job_id)
            if job is not None:  # gone meanwhile: cancelled, or run by another job's handler
                ran.append(run_claimed_job(queue.core, job, await_coroutine=await_coroutine))
        return ran
    while True:
        names = chosen if chosen is not None else _default_queues(queue)
        travel(names)
        job = _claim_next(queue, names)
        if job is None:
            return ran
        if len(ran) == max_jobs:
            queue.release([job])
            raise DrainLimitError(_limit_message(ran, job, max_jobs), ran)
        ran.append(run_claimed_job(queue.core, job, await_coroutine=await_coroutine))


def _claim_next(queue: Queue, names: list[str]) -> ClaimedJob | None:
    """The next job in claim order across `names`, claimed by the real claim of its queue."""
    executor = queue.core.executor
    with executor.connection() as conn:
        head = conn.execute(executor.statements.due_jobs, {"queues": names, "limit": 1}).first()
    if head is None:
        return None
    claimed = queue.claim(head.queue_name, worker_id=WORKER_ID, limit=1)
    return claimed[0] if claimed else None


def _check_runnable(queue: Queue, helper: str) -> None:
    if queue.core.executor.sync_refused:
        raise ConfigurationError(
            f"{helper} claims and records jobs with synchronous calls, which a Queue built from an "
            "AsyncEngine refuses: build the test's Queue from the database URL instead (it serves "
            "enqueue_async and async def handlers too)")


def _limit_message(ran: list[Any], next_job: ClaimedJob, max_jobs: int) -> str:
    counts = Counter(f"{r.job.task} {r.outcome}" for r in ran)
    most = ", ".join(f"{what} x{count}" for what, count in counts.most_common(5))
    return (f"drain ran max_jobs={max_jobs} jobs and job #{next_job.id} ({next_job.task}) is still due: "
            f"does a handler enqueue its own job again? Ran: {most}. Raise max_jobs, or drain with "
            "until_empty=False to run only the jobs due when the drain began.")


def _queue_names(queues: Iterable[str] | None) -> list[str] | None:
    if queues is None:
        return None
    if isinstance(queues, str):
        queues = [queues]
    names = list(queues)
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise InvalidInputError(f"queues must be queue names, got {name!r}")
    if not names:
        raise InvalidInputError("queues must name at least one queue (None: every queue with pending jobs)")
    return names


def _advance(advance: timedelta | float) -> timedelta:
    if isinstance(advance, (int, float)) and not isinstance(advance, bool):
        advance = timedelta(seconds=advance)
    if not isinstance(advance, timedelta):
        raise InvalidInputError(f"advance must be a timedelta or seconds, got {type(advance).__name__}")
    if advance < timedelta(0):
        raise InvalidInputError(f"advance must not be negative, got {advance}")
    return advance


def _default_queues(queue: Queue) -> list[str]:
    executor = queue.core.executor
    with executor.connection() as conn:
        return list(conn.execute(executor.statements.pending_queues, {"tasks": queue.task_names}).scalars())


class _TimeTravel:
    """`drain`'s ``advance``: before each claim, the jobs of the drained queues that are or
    became due within `advance` since the last move are moved back by it, each job once
    (`sql.time_travel.advance_due_jobs`)."""

    def __init__(self, queue: Queue, advance: timedelta) -> None:
        self.executor = queue.core.executor
        self.advance = advance
        self.since = _BEGINNING

    def __call__(self, names: list[str]) -> None:
        if not self.advance or not names:
            return
        statements = self.executor.statements
        with self.executor.transaction() as conn:
            now = conn.execute(statements.now).scalar_one()
            conn.execute(statements.advance_due, {"queues": names, "advance": self.advance,
                                                  "since": self.since, "now": now})
        self.since = now


# -- run_job -------------------------------------------------------------------------------


def run_job(queue: Queue, task: Any, payload: Mapping[str, Any], /, **context: Any) -> Ran:
    """Run one job of `task` with `payload` now, in the calling thread, as a worker would: the
    job is enqueued (committed), claimed by its id and run with a real `JobContext`
    (``ctx.transaction()`` included), and its outcome recorded. Returns the `Ran`.

    `context` sets what the handler's context says: ``attempt`` (default 1), ``max_attempts``,
    ``priority``, ``queue``, ``idempotency_key``, ``scheduled_at``; anything else is a
    TypeError. The job runs whether due, paused or not.

    When the handler raised, its exception is raised here once the outcome (a retry, or
    failed) is recorded, so ``pytest.raises`` works; a snooze is an outcome, not raised.
    """
    unknown = sorted(set(context) - set(RUN_JOB_CONTEXT))
    if unknown:
        raise TypeError(f"run_job() got unexpected context {', '.join(map(repr, unknown))}; "
                        f"allowed: {', '.join(RUN_JOB_CONTEXT)}")
    _check_runnable(queue, "run_job")
    registered = queue.get_task(task)
    attempt = context.get("attempt")
    max_attempts = context.get("max_attempts")
    if attempt is not None:
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
            raise InvalidInputError(f"attempt must be a positive int, got {attempt!r}")
        if attempt > (registered.max_attempts if max_attempts is None else max_attempts):
            raise InvalidInputError(f"attempt {attempt} is past max_attempts "
                                    f"{registered.max_attempts if max_attempts is None else max_attempts}")
    scheduled_at = context.get("scheduled_at")
    if scheduled_at is not None and (not isinstance(scheduled_at, datetime) or scheduled_at.tzinfo is None):
        raise InvalidInputError(f"scheduled_at must be a timezone-aware datetime, got {scheduled_at!r}")
    key = context.get("idempotency_key")
    if key is not None:
        with queue.core.executor.connection() as conn:
            holder = conn.execute(queue.core.statements.key_holder, {"key": key}).first()
        if holder is not None:
            raise InvalidInputError(f"job #{holder.id} is active and holds idempotency key {key!r}: "
                                    "run_job runs a new job, with a key of its own")
    job_id = queue.enqueue(registered, payload, queue=context.get("queue"), max_attempts=max_attempts,
                           idempotency_key=key, priority=context.get("priority"))
    job = claim_one(queue, job_id, attempt=attempt, scheduled_at=scheduled_at)
    if job is None:
        raise SqlaQueueError(f"job #{job_id} was taken by someone else before run_job could claim it "
                             "(is a worker running on this database?)")
    ran = run_claimed_job(queue.core, job, await_coroutine=asyncio.run)
    if ran.error is not None and ran.outcome in ("retried", "failed", "lost"):
        raise ran.error
    return ran


def claim_one(queue: Queue, job_id: int, *, attempt: int | None = None,
              scheduled_at: datetime | None = None, due_only: bool = False) -> ClaimedJob | None:
    """Claim pending job `job_id` of `queue`'s table, due or not unless `due_only` (None: not
    pending, not due, or busy), for this process to run (`run_job`, one pass of `drain`).
    `attempt` and `scheduled_at` replace what its context will say."""
    return queue.core.outcomes.claim_by_id(job_id, WORKER_ID, attempt=attempt, scheduled_at=scheduled_at,
                                           due_only=due_only)
