"""Inline mode, a testing aid: ``Queue(..., testing="inline")`` runs each enqueued job's handler
as soon as the transaction that enqueued it commits, in the committing thread.

* ``session=``: when the Session's outermost transaction commits (``after_commit``; the
  handlers run once the Session has closed that transaction, so it is usable again).
* ``connection=``: when the Connection's transaction commits: just before SQLAlchemy commits,
  the DBAPI connection is committed, the jobs run, and SQLAlchemy's own COMMIT then finds
  nothing left to do.
* neither: right after the enqueue's own commit, before `enqueue` returns.

A rollback drops the jobs of that transaction. Each due job is claimed by its id and run by the
worker's run of a claimed job, so its context, ``ctx.transaction()``, result and outcome are a
worker's; jobs its handler enqueues run after it, one at a time. A job scheduled for later
(``delay=``, ``run_at=``) is left pending, as is a retry: `sqla_queue.testing.drain` with
``advance`` runs them. When a handler raises, its outcome (a retry, or failed) is recorded and
the first such exception is raised from the committing call (``session.commit()``,
``connection.commit()``, the end of ``engine.begin()``, or `enqueue`).

Not for production: handlers run inside the request that enqueued them, and a handler's
failure fails the commit's caller. `enqueue_async` is not inline (use `drain_async`).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, event
from sqlalchemy.orm import Session

from ..core import Core
from ..errors import ConfigurationError, SqlaQueueError
from .job_run import Ran, run_claimed_job

INLINE = "inline"
MODES = (INLINE,)
"""The values ``Queue(testing=...)`` accepts besides None."""

INLINE_WORKER_ID = f"sqla_queue.inline:{os.getpid()}"
"""What inline mode records as ``locked_by`` of the jobs it runs."""

MAX_JOBS = 1000
"""How many jobs one commit may run inline (its jobs, theirs, ...) before `InlineLimitError`."""

_PENDING = "sqla_queue.inline.pending"
_COMMITTED = "sqla_queue.inline.committed"
_LISTENING = "sqla_queue.inline.listening"


class InlineLimitError(SqlaQueueError):
    """Inline jobs kept enqueueing inline jobs (a handler that enqueues its own task?)."""


def testing_mode(value: Any) -> str | None:
    """`Queue`'s ``testing=`` option, checked: None or ``"inline"``."""
    if value is None or value in MODES:
        return value
    raise ConfigurationError(f"testing must be None or {' or '.join(map(repr, MODES))}, got {value!r}")


class InlineRunner:
    """Runs the jobs a queue enqueues once their transaction commits (module docstring), on the
    queue's current core, which `core()` returns."""

    def __init__(self, core: Callable[[], Core]) -> None:
        self._core = core
        self._state = threading.local()

    @property
    def core(self) -> Core:
        """The queue's core now (`sqla_queue.testing.bind` may point the queue elsewhere)."""
        return self._core()

    def enqueued(self, ids: Sequence[int], session: Session | None, connection: Connection | None) -> None:
        """`Queue.enqueue` / `enqueue_many` wrote `ids` in the caller's transaction (or its own)."""
        if session is not None:
            self._after_session_commit(session, ids)
        elif connection is not None:
            self._after_connection_commit(connection, ids)
        else:
            self.run(ids)

    # -- when ------------------------------------------------------------------------------

    def _after_session_commit(self, session: Any, ids: Sequence[int]) -> None:
        if not isinstance(session, Session):  # a scoped_session: its Session of this scope
            session = session()
        session.info.setdefault(_PENDING, []).extend(ids)
        if session.info.get(_LISTENING):
            return
        session.info[_LISTENING] = True

        def committed(sess: Session) -> None:
            if not sess.in_nested_transaction():  # a SAVEPOINT released: not committed yet
                sess.info.setdefault(_COMMITTED, []).extend(sess.info.pop(_PENDING, []))

        def ended(sess: Session, transaction: Any) -> None:
            if transaction.parent is not None:
                return
            sess.info.pop(_PENDING, None)  # not committed: rolled back or closed
            ready = sess.info.pop(_COMMITTED, None)
            if ready:
                self.run(ready)

        event.listen(session, "after_commit", committed)
        event.listen(session, "after_transaction_end", ended)

    def _after_connection_commit(self, connection: Connection, ids: Sequence[int]) -> None:
        connection.info.setdefault(_PENDING, []).extend(ids)
        if connection.info.get(_LISTENING):
            return
        connection.info[_LISTENING] = True

        def committing(conn: Connection) -> None:
            ready = conn.info.pop(_PENDING, None)
            if ready:
                # SQLAlchemy announces a commit before it sends it; the jobs must be visible to
                # the connections that claim and run them, so the transaction commits first.
                conn.connection.dbapi_connection.commit()  # type: ignore[union-attr]
                self.run(ready)

        def rolling_back(conn: Connection) -> None:
            conn.info.pop(_PENDING, None)

        event.listen(connection, "commit", committing)
        event.listen(connection, "rollback", rolling_back)

    # -- what ------------------------------------------------------------------------------

    def run(self, ids: Sequence[int]) -> list[Ran]:
        """Claim and run each job of `ids` that is due; raise the first handler error once all
        ran. Jobs enqueued while a job runs (by its handler) wait until it has finished and
        run next, as they would with a worker: never inside the transaction of the handler
        that enqueued them."""
        state = self._state
        if getattr(state, "todo", None) is not None:  # called from a handler we are running
            state.todo.extend(ids)
            return []
        state.todo = deque(ids)
        ran: list[Ran] = []
        try:
            while state.todo:
                if len(ran) >= MAX_JOBS:
                    raise InlineLimitError(
                        f"inline mode ran {MAX_JOBS} jobs for one commit and jobs keep coming (next: job "
                        f"{state.todo[0]}): does a handler enqueue its own task? Test it with "
                        "sqla_queue.testing.drain and its max_jobs")
                one = self._run_one(state.todo.popleft())
                if one is not None:
                    ran.append(one)
        finally:
            state.todo = None
        for r in ran:
            if r.error is not None and r.outcome in ("retried", "failed", "lost"):
                raise r.error
        return ran

    def _run_one(self, job_id: int) -> Ran | None:
        job = self.core.outcomes.claim_by_id(job_id, INLINE_WORKER_ID, due_only=True)
        if job is None:
            if self.core.operations.get_job(job_id) is None:
                raise SqlaQueueError(
                    f"job {job_id} was enqueued in a transaction that reported a commit, but no other "
                    "connection can see it: is the session or connection inside an outer transaction "
                    "that has not committed (a test's rolled-back connection)? Inline mode runs jobs "
                    "once they are really committed.")
            return None  # not due yet (left for drain), or an idempotency key's holder, running or finished
        return run_claimed_job(self.core, job, await_coroutine=asyncio.run)
