"""Waiting for a job to finish: `Queue.wait` and `Queue.wait_async`.

Every statement that finishes jobs (completed, failed, cancelled) announces their ids on the
table's finish channel (`sql.notify.finished_channel`) in the same statement. A waiter LISTENs
on that channel on a connection of its own, reads the job's row only after LISTEN is active (a
job finishing in between is then either seen by that read or announced afterwards: no lost
wake-up), and reads it again when a notification names the job (or says "re-check" with an
empty payload).

Notifications are the fast path, not the only one: a notification can be lost (the listening
connection dropped and came back) or never delivered at all (PgBouncer in transaction pooling
mode passes NOTIFY through but not LISTEN), so the row is also re-read every `POLL_INTERVAL`
seconds whatever arrives. A waiter costs one idle connection and one primary-key read per
interval, never a tight loop.

The sync face waits on psycopg's blocking ``notifies()``; the asyncio face on the asyncio
driver connection's ``notifies()`` from the queue's asyncio engine, so the event loop is never
blocked and no thread is held.
"""

from __future__ import annotations

import time
from contextlib import aclosing, closing
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from . import _validate
from .errors import InvalidInputError, WaitTimeoutError
from .operations import job_view
from .types import FINISHED_STATUSES, JobView

if TYPE_CHECKING:
    from ._executor import Executor, Statements

POLL_INTERVAL = 1.0
"""Seconds between two reads of the waited-for row when no notification names it: the longest
a lost notification (or a pooler that drops LISTEN) delays `wait`. One primary-key read per
second per waiter is nothing next to what a worker does."""


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
            raise InvalidInputError(f"job {self.job_id} does not exist (it was never enqueued, "
                                    "or was cancelled while pending or pruned)")
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


def wait(queue: Any, job_id: int, timeout: timedelta | float | None) -> JobView:
    """`Queue.wait`: the job's view once it is finished."""
    state = _Deadline(job_id, timeout)
    done = state.finished(queue.get_job(state.job_id))  # already finished: no LISTEN needed
    if done is not None:
        return done
    executor: Executor = queue.executor
    with executor.listening(queue.call_timeout, executor.statements.listen_finished) as driver:
        while (done := state.finished(queue.get_job(state.job_id))) is None:
            with closing(driver.notifies(timeout=state.next_wait())) as notes:
                for note in notes:
                    if state.named_in(note.payload):
                        break
    return done


async def wait_async(queue: Any, job_id: int, timeout: timedelta | float | None) -> JobView:
    """`Queue.wait_async`: `wait` on the queue's asyncio engine."""
    state = _Deadline(job_id, timeout)
    executor: Executor = queue.executor
    read = partial(_read_job, executor.statements, state.job_id)

    done = state.finished(await executor.run_async(read, None, None))
    if done is not None:
        return done
    async with executor.listening_async(queue.call_timeout, executor.statements.listen_finished) as driver:
        while (done := state.finished(await executor.run_async(read, None, None))) is None:
            async with aclosing(driver.notifies(timeout=state.next_wait())) as notes:
                async for note in notes:
                    if state.named_in(note.payload):
                        break
    return done


def _read_job(statements: Statements, job_id: int, conn: Connection, fast: Any) -> JobView | None:
    row = conn.execute(statements.select_job, {"job_id": job_id}).first()
    return None if row is None else job_view(row)


def _seconds(value: timedelta | None) -> str:
    return f"{value.total_seconds():g}s" if value is not None else "forever"
