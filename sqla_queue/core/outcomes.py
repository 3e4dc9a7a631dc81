"""Claims and what happens to claimed jobs: complete, retry, fail, heartbeat, release, recover.

`Queue`'s methods of the same names delegate here. Every outcome is fenced by ``(job id, claim
token)``; a call that finds the claim gone reports it through the lost-claim hook. Statements
and transaction modes come from the executor; events go out through the plugin manager.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection

# The event payloads (`types.JobClaimed`, ...) load with the first event built.
from .. import _validate, types
from .._sanitize import error_text, traceback_text
from ..db.executor import Executor
from ..plugins.calls import emit, emit_each, failure_decision, heard
from ..sql.lease import RELEASED
from ..types import DEFAULT_LEASE, BatchCommitted, ClaimedJob, JobStatus, Outcome
from .counters import Counters
from .limits import LimitedClaim, Limits
from .workflows import settle_again


class Outcomes:
    """Claim and settle jobs on `executor`'s table, counting with `counters`, announcing to
    `plugin_manager`."""

    def __init__(self, executor: Executor, plugin_manager: Any, counters: Counters, *,
                 max_result_bytes: int = _validate.DEFAULT_MAX_RESULT_BYTES) -> None:
        self.executor = executor
        self.max_result_bytes = max_result_bytes
        self.plugin_manager = plugin_manager
        self.counters = counters
        self.statements = executor.statements
        self.limits: Limits | None = None  # set by `Core`: the claim of a limited queue goes there

    # -- results -----------------------------------------------------------------------------

    def result_text(self, value: Any, whose: str) -> str | None:
        """A handler's return value as the JSON text stored with its completion (None for
        None); `ResultError` naming `whose` when it has no JSON form or is too large."""
        return None if value is None else _validate.result_json(value, whose, self.max_result_bytes)

    def result_texts(self, jobs: Iterable[ClaimedJob], results: Mapping[int, Any] | None) -> dict[int, str]:
        """Every result checked before anything is written (`ResultError` names the task)."""
        if not results:
            return {}
        whose = {job.id: f"task {job.task!r}" for job in jobs}
        return {job_id: _validate.result_json(value, whose.get(job_id, f"job {job_id}"), self.max_result_bytes)
                for job_id, value in results.items() if value is not None}

    # -- claims ----------------------------------------------------------------------------

    def claim(self, queue: str, worker_id: str, limit: int,
              lease: timedelta | float = DEFAULT_LEASE) -> list[ClaimedJob]:
        """Claim up to `limit` jobs under one token and `lease`: their lease ends `lease` from
        now on the database clock (``lease_expires_at``), and recovery waits for that."""
        queue = _validate.name(queue, "queue")
        worker_id = _validate.name(worker_id, "worker_id")
        limit = _validate.positive_int(limit, "limit")
        if self.limits is not None and queue in self.limits.limited.names():
            return self.claim_limited(queue, worker_id, limit, lease).jobs
        params = {
            "queue": queue, "worker_id": worker_id, "limit": limit,
            "token": secrets.token_urlsafe(24), "lease": _lease(lease),
        }
        started = _BatchClock()
        with self.executor.transaction() as conn:
            rows = conn.execute(self.statements.claim, params).all()
            # Idle path only: an empty claim is classified and counted in the same transaction.
            empty_reason = None if rows else self.counters.count_empty_claim(conn, queue)
        jobs = sorted((ClaimedJob.from_row(row) for row in rows), key=lambda j: j.id)
        self._emit_claimed(jobs, rows, queue, worker_id, limit, empty_reason)
        self._emit_batch("claim", worker_id, [queue], jobs, (), started)
        return jobs

    def claim_limited(self, queue: str, worker_id: str, limit: int, lease: timedelta | float = DEFAULT_LEASE,
                      tasks: Sequence[str] | None = None, ahead: float = 0.0) -> LimitedClaim:
        """Claim from a limited queue (`core.limits`), announced as any claim; a claim a limit
        held back is not an empty claim. `ahead` as for `Limits.claim`."""
        got = self._limits().claim(queue, worker_id, limit, lease, tasks, ahead=ahead)
        self._emit_limited(got, queue, worker_id, limit)
        return got

    def _limits(self) -> Limits:
        if self.limits is None:
            raise RuntimeError("Outcomes.limits is set by Core; this Outcomes was built without one")
        return self.limits

    def _emit_limited(self, got: LimitedClaim, queue: str, worker_id: str, limit: int) -> None:
        if got.jobs or not got.throttled:
            self._emit_claimed(got.jobs, got.jobs, queue, worker_id, limit)

    def _settled(self, finished: Sequence[ClaimedJob], completed_rows: list[Any],
                 results: Mapping[int, str | None]) -> dict[int, bool]:
        """Whether each finished job is completed: by the round (`completed_rows`, announced
        here), or else by a statement of its own."""
        self._settle_again(completed_rows)
        self._emit_finished(completed_rows)
        completed = {row.id for row in completed_rows}
        return {job.id: job.id in completed or self.complete(job.id, job.claim_token, results.get(job.id))
                for job in finished}

    def _settle_again(self, rows: Sequence[Any]) -> None:
        """`workflows.settle_again` in a transaction of its own, for rows finished by a
        statement that committed alone (the round, `complete_many`); rarely needed, so the
        check is all the hot path pays."""
        if any(row.settle_again for row in rows):
            with self.executor.transaction() as conn:
                settle_again(conn, self.statements, rows)

    def claim_by_id(self, job_id: int, worker_id: str, *, attempt: int | None = None,
                    scheduled_at: datetime | None = None, due_only: bool = False,
                    lease: timedelta | float = DEFAULT_LEASE) -> ClaimedJob | None:
        """Claim pending job `job_id` (due or not, unless `due_only`; paused queue or not) for a
        runner that runs exactly that job (the testing helpers, inline mode); None: not pending
        (any more), not due, or busy. `attempt` and `scheduled_at` replace what its context
        will say."""
        statement = self.statements.claim_due_by_id if due_only else self.statements.claim_by_id
        params = {"job_id": job_id, "worker_id": worker_id, "token": secrets.token_urlsafe(24),
                  "attempt": attempt, "scheduled_at": scheduled_at, "lease": _lease(lease)}
        with self.executor.transaction() as conn:
            row = conn.execute(statement, params).first()
        return None if row is None else ClaimedJob.from_row(row)

    def complete_and_claim(
        self, finished: Iterable[ClaimedJob], queues: Sequence[str], worker_id: str, limit: int,
        positions: Mapping[str, Any], results: Mapping[int, str | None],
        lease: timedelta | float = DEFAULT_LEASE, tasks: Sequence[str] | None = None,
    ) -> tuple[dict[int, bool], list[ClaimedJob]]:
        """Complete `finished` and claim up to `limit` jobs from `queues` (taken in that order:
        the first takes what it can, the next what is left) whose task is one of `tasks` (None:
        any), each queue from its position in `positions` (absent: from the start of the claim
        order). `results`: JSON text of the finished jobs' return values, by job id (absent:
        none); the claimed jobs are held under `lease` (the worker's)."""
        finished = list(finished)
        queues = [_validate.name(queue, "queue") for queue in queues]
        worker_id = _validate.name(worker_id, "worker_id")
        limit = _validate.non_negative_int(limit, "limit")
        at = self._position_params(queues, positions)
        params = {"queues": queues, "tasks": None if tasks is None else list(tasks), "worker_id": worker_id,
                  "limit": limit, "token": secrets.token_urlsafe(24), "lease": _lease(lease), **at,
                  **_held_params(finished, results)}
        started = _BatchClock()
        with self.executor.round_connection() as conn:
            rows = self.executor.run_round(conn, params, from_position=bool(at))
            claimed_rows = [row for row in rows if row.claimed]
            # Idle path only: the queues a claim found empty are classified and counted (one
            # statement). A claim that got all it asked for may not have reached every queue.
            reached_all = limit and len(claimed_rows) < limit
            empty = [q for q in queues if not any(row.queue_name == q for row in claimed_rows)] if reached_all else []
            empty_reasons = self.counters.count_empty_claims(conn, empty) if empty else {}
        completed_rows = [row for row in rows if not row.claimed]
        results = self._settled(finished, completed_rows, results)
        jobs = sorted((ClaimedJob.from_row(row) for row in claimed_rows), key=lambda j: j.id)
        if jobs:
            self._emit_claimed(jobs, claimed_rows, queues[0], worker_id, limit)
        self._emit_batch("claim", worker_id, queues, jobs, completed_rows, started)
        for queue in empty:
            self._emit_claimed([], [], queue, worker_id, limit, empty_reasons.get(queue))
        return results, jobs

    def _position_params(self, queues: list[str], positions: Mapping[str, Any]) -> dict[str, list]:
        """Each queue's position as the claim order's ``:from_*`` parameters, one list per
        parameter aligned with `queues` (None where a queue has no position); {} for none."""
        given = {q: self.executor.order.position_params(positions[q]) for q in queues
                 if positions.get(q) is not None}
        if not given:
            return {}
        keys = next(iter(given.values()))
        return {key: [given[q][key] if q in given else None for q in queues] for key in keys}

    def _emit_claimed(self, jobs, rows, queue: str, worker_id: str, limit: int,
                      empty_reason: str | None = None) -> None:
        if not jobs:
            if heard(self.plugin_manager, "sqla_queue_empty_claim"):
                emit(self.plugin_manager, "sqla_queue_empty_claim",
                     event=types.EmptyClaim(queue=queue, worker_id=worker_id, limit=limit, reason=empty_reason))
            return
        if not heard(self.plugin_manager, "sqla_queue_job_claimed"):
            return
        run_at = {row.id: row.run_at for row in rows}
        emit_each(self.plugin_manager, "sqla_queue_job_claimed", (
            types.JobClaimed(job_id=job.id, queue=job.queue, task=job.task, attempt=job.attempts,
                             worker_id=worker_id, queue_wait=_queue_wait(job, run_at[job.id]))
            for job in jobs
        ))

    def _emit_batch(self, operation: str, worker_id: str | None, queues: Sequence[str],
                    claimed: Sequence[ClaimedJob], completed: Sequence[Any], started: _BatchClock) -> None:
        """`sqla_queue_batch_committed` for a batch that claimed or completed a job, if heard."""
        if (claimed or completed) and heard(self.plugin_manager, "sqla_queue_batch_committed"):
            emit(self.plugin_manager, "sqla_queue_batch_committed", event=BatchCommitted(
                operation=operation, worker_id=worker_id, queues=tuple(queues),
                claimed=tuple(job.id for job in claimed), completed=tuple(row.id for row in completed),
                started_at=started.wall, duration=timedelta(seconds=time.perf_counter() - started.counter)))

    # -- outcomes --------------------------------------------------------------------------

    def complete(self, job_id: int, claim_token: str, result: str | None = None) -> bool:
        row = self._guarded(self.statements.complete, job_id, claim_token, result=result)
        if row is None:
            self._lost(job_id, claim_token, "complete")
            return False
        if not row.replayed:
            self._emit_finished([row])
        return True

    def complete_many(self, jobs: Iterable[ClaimedJob], results: Mapping[int, str | None]) -> dict[int, bool]:
        jobs = list(jobs)
        if not jobs:
            return {}
        started = _BatchClock()
        with self.executor.single_statement() as conn:
            rows = self.executor.complete_many(conn, _held_params(jobs, results))
        self._settle_again(rows)
        self._emit_finished(rows)
        self._emit_batch("complete", None, sorted({job.queue for job in jobs}), (), rows, started)
        done = {row.id for row in rows}
        return {job.id: job.id in done or self.complete(job.id, job.claim_token, results.get(job.id))
                for job in jobs}

    def _emit_finished(self, rows: Sequence[Any]) -> None:
        """Completed rows, and the ones a cancel request turned into cancelled."""
        emit_each(self.plugin_manager, "sqla_queue_job_completed", (
            types.JobCompleted(job_id=row.id, queue=row.queue_name, task=row.task,
                               attempt=row.attempts, duration=row.duration)
            for row in rows if row.status != JobStatus.CANCELLED.value
        ))
        self._emit_cancelled(row for row in rows if row.status == JobStatus.CANCELLED.value)

    def _emit_cancelled(self, rows: Iterable[Any]) -> None:
        emit_each(self.plugin_manager, "sqla_queue_job_cancelled", (
            types.JobCancelled(job_id=row.id, queue=row.queue_name, task=row.task, attempt=row.attempts,
                               requested_while_running=True)
            for row in rows
        ))

    def retry(self, job_id: int, claim_token: str, error: BaseException | str,
              run_at: datetime | None, delay: timedelta | float | None) -> Outcome | None:
        when, wait = _validate.schedule(run_at, delay)
        trace = traceback_text(error)
        row = self._guarded(self.statements.retry, job_id, claim_token,
                            retry_at=when, delay=wait, error=error_text(error), traceback=trace)
        if row is None:
            self._lost(job_id, claim_token, "retry")
            return None
        return self._outcome(row, error, trace)

    def fail(self, job_id: int, claim_token: str, error: BaseException | str) -> Outcome | None:
        trace = traceback_text(error)
        row = self._guarded(self.statements.fail, job_id, claim_token, error=error_text(error), traceback=trace)
        if row is None:
            self._lost(job_id, claim_token, "fail")
            return None
        return self._outcome(row, error, trace)

    def handle_failure(self, job: ClaimedJob, error: BaseException) -> Outcome | None:
        delay = failure_decision(self.plugin_manager, job, error)
        if delay is False:
            return self.fail(job.id, job.claim_token, error)
        return self.retry(job.id, job.claim_token, error, None, delay)

    def _outcome(self, row: Any, error: BaseException | str, trace: str | None) -> Outcome:
        """The outcome of a retry or fail, and its event: the exception object (None for a
        string error) and the traceback text as stored."""
        outcome = Outcome(job_id=row.id, status=JobStatus(row.status), attempts=row.attempts,
                          max_attempts=row.max_attempts, run_at=row.run_at)
        if row.replayed:
            return outcome  # the first call's event already fired
        exception = None if isinstance(error, str) else error
        if outcome.status is JobStatus.CANCELLED:
            self._emit_cancelled([row])
        elif outcome.status is JobStatus.PENDING:
            if heard(self.plugin_manager, "sqla_queue_job_retried"):
                emit(self.plugin_manager, "sqla_queue_job_retried",
                     event=types.JobRetried(job_id=row.id, queue=row.queue_name, task=row.task,
                                            attempt=row.attempts, run_at=row.run_at, error=row.last_error or "",
                                            exception=exception, traceback=trace))
        elif heard(self.plugin_manager, "sqla_queue_job_failed"):
            emit(self.plugin_manager, "sqla_queue_job_failed",
                 event=types.JobFailed(job_id=row.id, queue=row.queue_name, task=row.task,
                                       attempt=row.attempts, error=row.last_error or "",
                                       exception=exception, traceback=trace))
        return outcome

    def snooze(self, job: ClaimedJob, delay: timedelta | float) -> Outcome | None:
        """Pending again after `delay` with the attempt given back; None: the claim was lost."""
        delay = _validate.snooze_delay(delay)
        row = self._guarded(self.statements.snooze, job.id, job.claim_token, delay=delay)
        if row is None:
            self._lost(job.id, job.claim_token, "snooze")
            return None
        outcome = Outcome(job_id=row.id, status=JobStatus(row.status), attempts=row.attempts,
                          max_attempts=row.max_attempts, run_at=row.run_at)
        if row.replayed:
            return outcome
        if outcome.status is JobStatus.CANCELLED:
            self._emit_cancelled([row])
        elif heard(self.plugin_manager, "sqla_queue_job_snoozed"):
            emit(self.plugin_manager, "sqla_queue_job_snoozed",
                 event=types.JobSnoozed(job_id=row.id, queue=row.queue_name, task=row.task, attempt=row.attempts,
                                        run_at=row.run_at, snoozes=row.snoozes))
        return outcome

    def _guarded(self, statement: Any, job_id: int, claim_token: str, **values: Any) -> Any:
        params = {"job_id": _validate.job_id(job_id), "token": _validate.claim_token(claim_token), **values}
        with self.executor.transaction() as conn:
            row = conn.execute(statement, params).first()
            if row is not None:
                settle_again(conn, self.statements, [row])
            self.counters.count_retry(conn, row)  # a retry's counter commits with the retry
            return row

    def report_fenced(self, job: ClaimedJob, reason: str) -> None:
        emit(self.plugin_manager, "sqla_queue_lost_claim",
             event=types.LostClaim(job_id=job.id, claim_token=job.claim_token, reason=reason, operation="fence"))

    def _lost(self, job_id: int, claim_token: str, operation: str, *, unless_finished: bool = False) -> str | None:
        """Report a lost claim with what the job's row says now; returns that reason."""
        with self.executor.connection() as conn:
            state = conn.execute(self.statements.claim_state, {"job_id": job_id}).first()
        if unless_finished and state is not None and state.claim_token == claim_token:
            return None  # finished under this very token: an outcome of this claim raced the caller
        reason = _lost_reason(state)
        emit(self.plugin_manager, "sqla_queue_lost_claim",
             event=types.LostClaim(job_id=job_id, claim_token=claim_token, reason=reason, operation=operation))
        return reason

    # -- the handler's transaction (`_handler_transaction`) ----------------------------------

    def complete_in_transaction(self, conn: Connection, job: ClaimedJob, result: str | None) -> Any:
        """Complete `job` on `conn`, in the handler's transaction (which the caller commits):
        the completed row, or None when this claim no longer holds the job or a cancel was
        requested (the caller rolls back and asks `cancel_requested_in`)."""
        params = {"job_id": job.id, "token": job.claim_token, "result": result}
        row = conn.execute(self.statements.complete_in_handler_transaction, params).first()
        if row is not None:
            settle_again(conn, self.statements, [row])
        return row

    def cancel_requested_in(self, conn: Connection, job: ClaimedJob) -> bool:
        """True if `job` is still held by its claim with a cancel request: why a completion in
        the handler's transaction found no row, when it was not a lost claim."""
        state = conn.execute(self.statements.claim_state, {"job_id": job.id}).first()
        return (state is not None and state.status == JobStatus.RUNNING.value
                and state.claim_token == job.claim_token and state.cancel_requested_at is not None)

    def lost_in_transaction(self, job: ClaimedJob) -> str:
        return self._lost(job.id, job.claim_token, "transaction") or "the claim was lost"

    def completed_in_transaction(self, row: Any) -> None:
        """The handler's transaction committed `row`'s completion: its event, as any completion's."""
        self._emit_finished([row])

    # -- leases ----------------------------------------------------------------------------

    def heartbeat(self, jobs: Iterable[ClaimedJob], lease: timedelta | float | None = None) -> set[int]:
        return set(self.renew(jobs, lease))

    def renew(self, jobs: Iterable[ClaimedJob], lease: timedelta | float | None = None) -> dict[int, bool]:
        """Renew leases for `lease` from now (None: each claim's own length again):
        ``{renewed job id: cancel requested?}``; the lease keeper passes the requests on to the
        handlers (`JobContext.cancel_requested`)."""
        jobs = list(jobs)
        if not jobs:
            return {}
        params = {**_held_params(jobs), "lease": None if lease is None else _lease(lease)}
        with self.executor.single_statement() as conn:
            rows = conn.execute(self.statements.renew, params).all()
        renewed = {row.id: row.cancel_requested for row in rows}
        for job in jobs:
            if job.id not in renewed:
                self._lost(job.id, job.claim_token, "heartbeat", unless_finished=True)
        return renewed

    def release(self, jobs: Iterable[ClaimedJob], reason: str = RELEASED) -> list[int]:
        """Give held jobs back, `reason` their ``last_error`` (a constant of `sql.lease`); a job
        with a cancel request ends cancelled instead, announced as any cancellation."""
        jobs = list(jobs)
        if not jobs:
            return []
        with self.executor.single_statement() as conn:
            rows = conn.execute(self.statements.release, {**_held_params(jobs), "reason": reason}).all()
        self._emit_cancelled(row for row in rows if row.status == JobStatus.CANCELLED.value)
        return sorted(row.id for row in rows)

    def recover_expired(self, lease: timedelta | float, limit: int) -> list[int]:
        """Take back running jobs whose holder's lease ended (``lease_expires_at``); `lease` only
        judges rows claimed before revision sqlaq_0008, which have no lease end."""
        params = {"lease": _lease(lease),
                  "limit": _validate.positive_int(limit, "limit")}
        with self.executor.transaction() as conn:
            requeued = conn.execute(self.statements.requeue_expired, params).all()
            self.counters.count_recovered(conn, requeued)
        with self.executor.transaction() as conn:
            failed = conn.execute(self.statements.fail_expired, params).all()
            self.counters.count_recovered(conn, failed)
        with self.executor.transaction() as conn:
            cancelled = conn.execute(self.statements.cancel_expired, params).all()
            self.counters.count_recovered(conn, cancelled)
        with self.executor.transaction() as conn:  # the backstop of `workflows.settle_again`
            conn.execute(self.statements.settle_waiting, {"limit": params["limit"]}).all()
        for rows, status in ((requeued, JobStatus.PENDING), (failed, JobStatus.FAILED),
                             (cancelled, JobStatus.CANCELLED)):
            for row in rows:
                emit(self.plugin_manager, "sqla_queue_job_recovered",
                     event=types.JobRecovered(job_id=row.id, queue=row.queue_name, task=row.task, status=status))
        return sorted(row.id for row in (*requeued, *failed, *cancelled))


def _held_params(jobs: Sequence[ClaimedJob], results: Mapping[int, str | None] | None = None) -> dict[str, list[Any]]:
    """Sorted by id, so that two batch statements on overlapping jobs (a heartbeat and a
    completion from one worker) lock rows in the same order and cannot deadlock. With
    `results`, each job's result text (or None) in the same order."""
    ordered = sorted(jobs, key=lambda job: job.id)
    params = {"job_ids": [job.id for job in ordered], "tokens": [job.claim_token for job in ordered]}
    if results is not None:
        params["results"] = [results.get(job.id) for job in ordered]
    return params


def _lease(lease: timedelta | float) -> timedelta:
    return _validate.duration(lease, "lease", positive=True)


def _queue_wait(job: ClaimedJob, run_at: datetime | None) -> timedelta | None:
    """From due to claimed: how long the job waited for a worker."""
    return job.locked_at - run_at if job.locked_at and run_at else None


def _lost_reason(state: Any) -> str:
    if state is None:
        return "job no longer exists"
    if state.status == JobStatus.RUNNING.value:
        return "job was claimed again under another token"
    if state.claim_token is None and state.last_error and "lease expired" in state.last_error:
        return f"claim lease expired and the job was recovered (now {state.status})"
    return f"job is {state.status} under another claim"


class _BatchClock:
    """When a batch started: the wall clock for its event, a perf counter for its duration."""

    __slots__ = ("counter", "wall")

    def __init__(self) -> None:
        self.wall = datetime.now(UTC)
        self.counter = time.perf_counter()
