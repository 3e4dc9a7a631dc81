"""Fixtures shared by the feature directories that work on jobs: an event recorder, readers
of stored rows (through the test's ``connection`` when it has one, see tests/conftest.py), and
moves of the database clock for committed jobs (``run_sql``, ``expire_lease``, ``make_due``).
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, text

import sqla_queue as sq


class EventRecorder:
    """A plugin that keeps every lifecycle event it is given, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def of(self, name: str) -> list[Any]:
        return [event for kind, event in self.events if kind == name]

    @property
    def names(self) -> list[str]:
        return [kind for kind, _ in self.events]

    @sq.hookimpl
    def sqla_queue_job_enqueued(self, event):
        self.events.append(("enqueued", event))

    @sq.hookimpl
    def sqla_queue_job_claimed(self, event):
        self.events.append(("claimed", event))

    @sq.hookimpl
    def sqla_queue_empty_claim(self, event):
        self.events.append(("empty_claim", event))

    @sq.hookimpl
    def sqla_queue_job_completed(self, event):
        self.events.append(("completed", event))

    @sq.hookimpl
    def sqla_queue_job_retried(self, event):
        self.events.append(("retried", event))

    @sq.hookimpl
    def sqla_queue_job_failed(self, event):
        self.events.append(("failed", event))

    @sq.hookimpl
    def sqla_queue_job_snoozed(self, event):
        self.events.append(("snoozed", event))

    @sq.hookimpl
    def sqla_queue_job_cancelled(self, event):
        self.events.append(("cancelled", event))

    @sq.hookimpl
    def sqla_queue_job_recovered(self, event):
        self.events.append(("recovered", event))

    @sq.hookimpl
    def sqla_queue_lost_claim(self, event):
        self.events.append(("lost_claim", event))


@pytest.fixture
def recorder() -> EventRecorder:
    return EventRecorder()


@pytest.fixture
def recorded_queue(engine: Engine, clean_jobs: None, recorder: EventRecorder) -> sq.Queue:
    """Like ``queue``, with an `EventRecorder` registered through ``plugins=``."""
    q = sq.Queue(engine, load_entrypoints=False, plugins=[recorder])
    q.task(lambda payload, ctx: None, name="send_email")
    q.task(lambda payload, ctx: None, name="resize", queue="images", max_attempts=2)
    return q


@pytest.fixture
def job_row(read_jobs):
    """The whole stored row of one job, as a dict (None if it is gone)."""

    def read(job_id: int) -> dict[str, Any] | None:
        with read_jobs() as conn:
            row = conn.execute(
                text("SELECT * FROM sqla_queue_jobs WHERE id = :id"), {"id": job_id}
            ).mappings().first()
        return None if row is None else dict(row)

    return read


@pytest.fixture
def table_rows(read_jobs):
    """Every row of the job table, ordered by id: compare before/after to prove "unchanged"."""

    def read() -> list[dict[str, Any]]:
        with read_jobs() as conn:
            rows = conn.execute(text("SELECT * FROM sqla_queue_jobs ORDER BY id")).mappings().all()
        return [dict(row) for row in rows]

    return read


@pytest.fixture
def run_sql(engine: Engine):
    """Run one statement in its own committed transaction (moving timestamps, not sleeping)."""

    def run(sql: str, **params: Any) -> None:
        with engine.begin() as conn:
            conn.execute(text(sql), params)

    return run


@pytest.fixture
def expire_lease(run_sql):
    """Make a running job's claim (or last renewal) an hour old, on the database's clock: its
    lease start and its lease end move back together (a lease end stays NULL)."""

    def expire(job_id: int, by: str = "1 hour") -> None:
        run_sql(
            "UPDATE sqla_queue_jobs SET locked_at = clock_timestamp() - CAST(:by AS interval), "
            "lease_expires_at = clock_timestamp() - CAST(:by AS interval) + (lease_expires_at - locked_at) "
            "WHERE id = :id AND status = 'running'",
            id=job_id, by=by,
        )

    return expire


@pytest.fixture
def make_due(run_sql):
    """Move a pending job's run_at into the past, on the database's clock."""

    def due(job_id: int) -> None:
        run_sql(
            "UPDATE sqla_queue_jobs SET run_at = clock_timestamp() - interval '1 second' "
            "WHERE id = :id",
            id=job_id,
        )

    return due
