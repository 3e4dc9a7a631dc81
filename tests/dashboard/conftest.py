"""Setup for the dashboard's tests: a Queue on a database of this directory's own (the browser
suite commits, runs a worker and records samples), emptied before each test, and the jobs the
pages show: pending, running, completed and failed ones, made through the public API."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import create_engine, text

import sqla_queue as sq
from sqla_queue.types import JobView

DASH_TABLES = """SELECT string_agg(quote_ident(tablename), ', ') FROM pg_tables
                 WHERE schemaname = current_schema() AND tablename LIKE 'sqla_queue_jobs%'"""


@pytest.fixture(scope="session")
def dash_database(create_database) -> str:
    return create_database()


@pytest.fixture(scope="session")
def dash_engine(dash_database):
    engine = create_engine(dash_database, pool_size=8, max_overflow=8)
    yield engine
    engine.dispose()


def empty_tables(engine) -> None:
    """The job table and its companions (counters, queues, schedules, samples), ids from 1."""
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL lock_timeout = '30s'"))
        tables = conn.execute(text(DASH_TABLES)).scalar_one()
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY"))


@pytest.fixture
def dash_queue(dash_engine) -> Iterator[sq.Queue]:
    """A Queue with ``send_email`` (queue default), ``resize`` (queue images) and ``explode``
    (always raises, one attempt) on an empty table."""
    empty_tables(dash_engine)
    queue = sq.Queue(dash_engine, load_entrypoints=False)

    @queue.task
    def send_email(payload, ctx):
        return {"sent_to": payload.get("to")}

    @queue.task(queue="images", max_attempts=2)
    def resize(payload, ctx):
        return None

    @queue.task(max_attempts=1)
    def explode(payload, ctx):
        raise ValueError("the <b>mailer</b> refused")

    yield queue
    empty_tables(dash_engine)


@pytest.fixture
def failed_job(dash_queue) -> Callable[..., JobView]:
    """Factory: a job of `task` that has failed for good, with `error` as its last error (a
    high priority makes it the one claimed before the test's pending jobs)."""

    def make(payload: dict | None = None, *, task: str = "send_email", error: str = "SMTP said no") -> JobView:
        job_id = dash_queue.enqueue(task, payload or {"to": "a@example.com"}, priority=100)
        queue_name = dash_queue.get_job(job_id).queue
        [claimed] = dash_queue.claim(queue_name, worker_id="test-worker", limit=1)
        assert claimed.id == job_id
        assert dash_queue.fail(claimed.id, claimed.claim_token, error=error)
        return dash_queue.get_job(job_id)

    return make
