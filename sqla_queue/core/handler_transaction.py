"""``ctx.transaction()``: the handler's database writes and its job's completion in one
transaction, so they commit together or not at all.

Delivery stays at-least-once (a handler may run again after a crash), but the claim token fences
the completion: the guarded UPDATE that completes the job runs inside the handler's own
transaction, just before its commit. When the claim is no longer this run's (its lease was
recovered, another worker holds it, someone asked to cancel it), that UPDATE matches no row and
the whole transaction is rolled back: a stale run's writes never commit, and a job's writes
commit once (docs/explanation/delivery-semantics.md).

The worker (and `sqla_queue.testing`'s runners) give each run a `HandlerTransaction`; the
handler reaches it through its `JobContext`. Afterwards the runner asks `outcome`: a run whose
transaction committed is completed already, one whose claim was found lost is settled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, event

from .. import _validate
from ..db import kinds
from ..errors import ConfigurationError, JobCancelledError, LostClaimError

if TYPE_CHECKING:  # the ORM is imported by the first ctx.transaction(), not by every worker
    from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
    from sqlalchemy.orm import Session

    from .._tasks import Task
    from ..db.executor import Executor
    from ..types import CancelSignal, ClaimedJob
    from .outcomes import Outcomes


@dataclass(frozen=True)
class HandlerSessions:
    """Where handler transactions open their sessions by default: `engine` (the application's,
    not a worker's autocommit one) for ``with``, the queue's asyncio engine for ``async with``
    (made on first use: a worker whose handlers never ask makes none)."""

    engine: Engine
    executor: Executor

    def asyncio_engine(self) -> AsyncEngine | None:
        return self.executor.asyncio_engine()


class HandlerTransaction:
    """One run's ``ctx.transaction()``, as ``with`` (a `Session`) or ``async with`` (an
    `AsyncSession`): until a block commits or finds the claim lost (a rolled-back one may be
    tried again). `outcome` is None until a block ends, then ``"committed"`` (the job is
    completed), ``"lost"`` (the claim was lost and reported) or ``"rolled_back"``."""

    COMMITTED, LOST, ROLLED_BACK = "committed", "lost", "rolled_back"

    def __init__(self, outcomes: Outcomes, job: ClaimedJob, task: Task | None, sessions: HandlerSessions,
                 cancel_requested: CancelSignal, *, max_result_bytes: int,
                 on_settled: Callable[[str], bool] | None = None) -> None:
        self._outcomes = outcomes
        self._on_settled = on_settled
        self._max_result_bytes = max_result_bytes
        self._job = job
        self._task = task
        self._sessions = sessions
        self._cancel_requested = cancel_requested
        self._session: Any = None
        self._ending = False  # our own commit, at the block's end, is the only one allowed
        self._ended_inside = False  # the handler rolled back or closed the block's session
        self._result: str | None = None
        self.result: Any = None  # what set_result recorded, stored by a committed block
        self.outcome: str | None = None

    # -- what the handler calls (through JobContext) ------------------------------------

    def set_result(self, value: Any) -> None:
        """The result stored with the completion: checked now, so a bad one fails in the block."""
        if self._session is None:
            raise RuntimeError(
                f"job {self._job.id}: ctx.set_result() records the result that ctx.transaction() "
                "stores with its completion, so it belongs inside that block; without one, return "
                "the value from the handler"
            )
        self._result = None if value is None else _validate.result_json(
            value, f"task {self._job.task!r}", self._max_result_bytes)
        self.result = value

    def __enter__(self) -> Session:
        from sqlalchemy.orm import Session

        session = self._open(self._new_session(), Session, "with", "a Session (a sessionmaker)")
        return session

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        session, self._session = self._session, None
        try:
            if exc_type is not None:
                session.rollback()
                self.outcome = self.ROLLED_BACK
                return False
            self._refuse_ended_inside(session)
            session.flush()
            row = self._complete(session.connection(bind_arguments={"clause": self._statement}))
            if row is None:
                session.rollback()
                self._raise_not_ours(session)
            self._ending = True
            session.commit()
        finally:
            session.close()
        self._committed(row)
        return False

    async def __aenter__(self) -> AsyncSession:
        from sqlalchemy.ext.asyncio import AsyncSession

        return self._open(self._new_async_session(), AsyncSession, "async with",
                          "an AsyncSession (an async_sessionmaker)")

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        session, self._session = self._session, None
        try:
            if exc_type is not None:
                await session.rollback()
                self.outcome = self.ROLLED_BACK
                return False
            await session.run_sync(self._refuse_ended_inside)
            await session.flush()
            row = await session.run_sync(
                lambda sync: self._complete(sync.connection(bind_arguments={"clause": self._statement})))
            if row is None:
                await session.rollback()
                await session.run_sync(self._raise_not_ours)
            self._ending = True
            await session.commit()
        finally:
            await session.close()
        self._committed(row)
        return False

    # -- the block --------------------------------------------------------------------

    @property
    def _statement(self) -> Any:
        return self._outcomes.statements.complete_in_handler_transaction

    def _open(self, session: Any, kind: type, form: str, expected: str) -> Any:
        job = self._job
        if not isinstance(session, kind):
            raise ConfigurationError(
                f"task {job.task!r}: `{form} ctx.transaction()` needs {expected}; the session "
                f"factory returned {type(session).__name__}"
            )
        if self._session is not None or self.outcome in (self.COMMITTED, self.LOST):
            _close_quietly(session)
            raise RuntimeError(f"job {job.id}: ctx.transaction() blocks do not nest" if self._session
                               else f"job {job.id}: ctx.transaction() completes the job once per run "
                                    f"(an earlier block {'committed' if self.outcome == self.COMMITTED else 'lost the claim'})")
        if self._cancel_requested.is_set():
            _close_quietly(session)
            raise JobCancelledError(f"job {job.id} was cancelled on request before its transaction began")
        self._session = session
        self._ending = self._ended_inside = False
        sync_session = session.sync_session if kinds.is_async_session(session) else session
        event.listen(sync_session, "before_commit", self._refuse_early_commit)
        event.listen(sync_session, "after_transaction_end", self._note_ended_inside)
        return session

    def _note_ended_inside(self, session: Session, transaction: Any) -> None:
        if transaction.parent is None and not self._ending:  # a savepoint ending is the handler's own
            self._ended_inside = True

    def _refuse_ended_inside(self, session: Session) -> None:
        """A ``session.rollback()`` or ``close()`` in the block threw the handler's writes away;
        completing the job now would record it done without them. The attempt fails instead."""
        if self._ended_inside:
            session.rollback()
            raise RuntimeError(
                f"job {self._job.id}: the session of ctx.transaction() was rolled back or closed inside "
                "the block, so the writes made in it are gone; the job is not completed (raise to "
                "give up an attempt, or let the block end to commit)")

    def _refuse_early_commit(self, session: Session) -> None:
        """A ``session.commit()`` inside the block would commit the handler's writes ahead of
        the fenced completion: a stale run's writes would persist. Refused; the block commits
        both when it ends."""
        if not self._ending:
            raise RuntimeError(
                f"job {self._job.id}: session.commit() inside ctx.transaction() would commit the "
                "handler's writes without the job's completion; the block commits both when it ends "
                "(the transaction was rolled back)")

    def _new_session(self) -> Any:
        factory = self._task.session_factory if self._task is not None else None
        from sqlalchemy.orm import Session

        # Objects read in the block stay readable after it (not expired by the commit).
        return factory() if factory is not None else Session(self._sessions.engine, expire_on_commit=False)

    def _new_async_session(self) -> Any:
        factory = self._task.session_factory if self._task is not None else None
        if factory is not None:
            return factory()
        engine = self._sessions.asyncio_engine()
        if engine is None:
            raise ConfigurationError(
                f"task {self._job.task!r}: `async with ctx.transaction()` opens an AsyncSession on "
                "the queue's asyncio engine, and this queue has none (it was built from an Engine): "
                "build the Queue from a URL or an AsyncEngine, or give the task "
                "session_factory=async_sessionmaker(...)"
            )
        from sqlalchemy.ext.asyncio import AsyncSession

        return AsyncSession(engine, expire_on_commit=False)

    def _complete(self, conn: Any) -> Any:
        return self._outcomes.complete_in_transaction(conn, self._job, self._result)

    def _raise_not_ours(self, sync_session: Any) -> None:
        """After the rollback: why the completion matched no row (a new read), as the error the
        handler sees; a lost claim is reported like any other."""
        job = self._job
        if self._outcomes.cancel_requested_in(sync_session.connection(), job):
            self.outcome = self.ROLLED_BACK
            sync_session.rollback()
            raise JobCancelledError(f"job {job.id} was cancelled on request: its transaction was "
                                    "rolled back, nothing it wrote was committed")
        sync_session.rollback()
        self.outcome = self.LOST
        # A worker that gave the job up already (a lease renewal found it lost, or it was
        # fenced) has reported it: one report per lost claim.
        reason = self._outcomes.lost_in_transaction(job) if self._settled("lost") else "its claim was lost"
        raise LostClaimError(f"job {job.id}: {reason}; its transaction was rolled back, nothing it "
                             "wrote was committed")

    def _committed(self, row: Any) -> None:
        self.outcome = self.COMMITTED
        self._settled("completed")
        self._outcomes.completed_in_transaction(row)

    def _settled(self, outcome: str) -> bool:
        """Tell the runner at once: the handler may run on after the block (sending the mail),
        and its job must not look like one still holding a lease meanwhile. False when the
        runner had settled the job before (timed out, fenced, found lost)."""
        return True if self._on_settled is None else self._on_settled(outcome)


def _close_quietly(session: Any) -> None:
    from sqlalchemy.orm import Session

    if isinstance(session, Session):
        session.close()
