"""Waiting for a job to finish: `Queue.wait` and `Queue.wait_async`.

A statement that finishes jobs (completed, failed, cancelled) announces, in the same statement,
the ids of those a waiter *watches* on the table's finish channel (`sql.notify.finished_channel`;
only watched ones, since every NOTIFY wakes every listening session of the database). A waiter
LISTENs on that channel on a connection of its own, then marks its job watched
(`sql.watch_job`, a no-op on a finished job), then reads the job's row: a job finishing before
the mark is seen by that read, one finishing after it is announced to a session already
listening, so no wake-up is lost. It reads the row again when a notification names the job (or
says "re-check" with an empty payload).

Notifications are the fast path, not the only one: a notification can be lost (the listening
connection dropped and came back) or never delivered at all (PgBouncer in transaction pooling
mode passes NOTIFY through but not LISTEN), so the row is also re-read every `POLL_INTERVAL`
seconds whatever arrives, and a LISTEN connection that breaks leaves the wait to those reads
alone. A waiter costs one idle connection and one primary-key read per interval, never a tight
loop.

The sync face waits on psycopg's blocking ``notifies()``; the asyncio face on the asyncio
driver connection's ``notifies()`` from the queue's asyncio engine, so the event loop is never
blocked and no thread is held.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import aclosing, closing
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from .. import _validate
from ..errors import ConfigurationError, InvalidInputError, SqlaQueueError, WaitTimeoutError
from ..states import FINISHED_STATUSES
from .operations import job_view

if TYPE_CHECKING:
    from ..db.executor import Executor, Statements
    from ..reports import JobView

logger = logging.getLogger("sqla_queue.wait")

POLL_INTERVAL = 1.0
"""Seconds between two reads of the waited-for row when no notification names it: the longest
a lost notification (or a pooler that drops LISTEN) delays `wait`. One primary-key read per
second per waiter is nothing next to what a worker does."""

_NO_ASYNC_WAIT = (
    "wait_async waits on the queue's asyncio engine, and this Queue was built from a synchronous "
    "Engine: build it from a database URL (it serves both faces) or an AsyncEngine, or wait in a "
    "thread with `await asyncio.to_thread(queue.wait, job_id)`"
)


class _Deadline:
    """One wait's bookkeeping, shared by both faces: what to check, until when, and the state
    the job was last seen in (for the timeout's message)."""

    def __init__(self, job_id: Any, timeout: Any) -> None:
        self.job_id = _validate.job_id(job_id)
        self.timeout = None if timeout is None else _validate.duration(timeout, "timeout")
        self.ends = None if self.timeout is None else time.monotonic() + self.timeout.total_seconds()
        self.last_status = ""

    def finished(self, view: JobView | None) -> JobView | None:
        """`view` if the job is finished; None if it is still to wait for."""
        if view is None:
            raise InvalidInputError(f"job {self.job_id} does not exist (never enqueued, not "
                                    "committed yet, or pruned)")
        self.last_status = view.status.value
        return view if view.status in FINISHED_STATUSES else None

    def next_wait(self) -> float:
        """How long to listen before the next read; raises `WaitTimeoutError` once the timeout
        has passed (always after a last read, so a job finished at the deadline is returned)."""
        if self.ends is None:
            return POLL_INTERVAL
        remaining = self.ends - time.monotonic()
        if remaining <= 0:
            raise WaitTimeoutError(
                f"job {self.job_id} did not finish within {_seconds(self.timeout)}: "
                f"it is still {self.last_status}"
            )
        return min(POLL_INTERVAL, remaining)

    def named_in(self, payload: str) -> bool:
        """True for a notification naming this job, or an empty one ("something finished")."""
        return payload == "" or str(self.job_id) in payload.split(",")


def wait(core: Any, job_id: int, timeout: timedelta | float | None) -> JobView:
    """`Queue.wait` on `core` (`sqla_queue.core.Core`): the job's view once it is finished."""
    state = _Deadline(job_id, timeout)
    read = partial(core.operations.get_job, state.job_id)
    done = state.finished(read())  # already finished: no LISTEN connection needed
    if done is not None:
        return done
    state.next_wait()  # a timeout of 0 ends here
    executor: Executor = core.executor
    watch = partial(_watch_job, executor.statements, state.job_id)
    try:
        with executor.listening(executor.call_timeout, executor.statements.listen_finished) as driver:
            with executor.transaction() as conn:
                watch(conn, None)
            return _until_finished(state, read, partial(_notified, driver, state))
    except SqlaQueueError:
        raise
    except Exception as exc:  # the LISTEN connection broke: notifications are only a shortcut
        _falling_back(state, exc)
        return _until_finished(state, read, lambda: time.sleep(state.next_wait()))


async def wait_async(core: Any, job_id: int, timeout: timedelta | float | None) -> JobView:
    """`Queue.wait_async`: `wait` on the queue's asyncio engine, awaiting on the event loop."""
    state = _Deadline(job_id, timeout)
    executor: Executor = core.executor
    if executor.asyncio_engine_missing:
        raise ConfigurationError(_NO_ASYNC_WAIT)
    read = partial(executor.run_async, partial(_read_job, executor.statements, state.job_id), None, None)
    done = state.finished(await read())
    if done is not None:
        return done
    state.next_wait()
    watch = partial(_watch_job, executor.statements, state.job_id)
    try:
        async with executor.listening_async(executor.statements.listen_finished) as driver:
            await executor.run_async(watch, None, None)
            while (done := state.finished(await read())) is None:
                await _notified_async(driver, state)
            return done
    except SqlaQueueError:
        raise
    except Exception as exc:  # as in `wait`
        _falling_back(state, exc)
        while (done := state.finished(await read())) is None:
            await asyncio.sleep(state.next_wait())
        return done


def _until_finished(state: _Deadline, read: Callable[[], JobView | None], pause: Callable[[], None]) -> JobView:
    while (done := state.finished(read())) is None:
        pause()
    return done


def _notified(driver: Any, state: _Deadline) -> None:
    """Return when a notification names the job, or after the poll interval."""
    with closing(driver.notifies(timeout=state.next_wait())) as notes:
        for note in notes:
            if state.named_in(note.payload):
                return


async def _notified_async(driver: Any, state: _Deadline) -> None:
    async with aclosing(driver.notifies(timeout=state.next_wait())) as notes:
        async for note in notes:
            if state.named_in(note.payload):
                return


def _falling_back(state: _Deadline, error: Exception) -> None:
    logger.warning("wait for job %d: LISTEN connection lost (%s); reading the job every %gs instead",
                   state.job_id, type(error).__name__, POLL_INTERVAL)


def _watch_job(statements: Statements, job_id: int, conn: Connection, fast: Any) -> None:
    """Ask for the job's finish to be announced (after LISTEN, before the next read)."""
    conn.execute(statements.watch_job, {"job_id": job_id})


def _read_job(statements: Statements, job_id: int, conn: Connection, fast: Any) -> JobView | None:
    row = conn.execute(statements.select_job, {"job_id": job_id}).first()
    return None if row is None else job_view(row)


def _seconds(value: timedelta | None) -> str:
    return f"{value.total_seconds():g}s" if value is not None else "forever"
