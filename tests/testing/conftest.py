"""Setup for the tests of the testing helpers (`sqla_queue.testing.handlers`) and the pytest
plugin: each test gets a database of its own from the plugin's ``sqla_queue_database_url``
fixture (the helpers read and write committed data), and ``queue`` is a Queue on it with a few
tasks that record what they were given."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import Engine, create_engine, text

import sqla_queue as sq

# A separate project that test_plugin_project.py copies and runs with pytest in a subprocess.
collect_ignore = ["shop_project"]


@pytest.fixture
def own_engine(sqla_queue_database_url: str) -> Iterator[Engine]:
    engine = create_engine(sqla_queue_database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def calls() -> list[tuple[str, dict, sq.JobContext]]:
    """What the tasks of ``queue`` were called with, in order: (task, payload, ctx)."""
    return []


@pytest.fixture
def queue(own_engine: Engine, calls) -> sq.Queue:
    """A Queue on the test's own database: ``send_receipt`` (queue "mail"), ``resize`` (queue
    "images", 2 attempts), ``flaky`` (fails until its payload's ``succeed_on`` attempt, retried
    after 10 minutes), ``remind`` (snoozes for an hour the first time) and ``record`` (writes
    its ``note`` to the ``effects`` table inside ``ctx.transaction()``, result "recorded", and
    raises in the block when the payload says ``fail``; retried after 10 minutes: the default
    backoff's second or so is over before a drain on a slow machine ends)."""
    q = sq.Queue(own_engine, load_entrypoints=False)

    @q.task(queue="mail")
    def send_receipt(payload, ctx):
        calls.append(("send_receipt", payload, ctx))
        return {"sent": payload["order_id"]}

    @q.task(queue="images", max_attempts=2)
    def resize(payload, ctx):
        calls.append(("resize", payload, ctx))

    @q.task(retry_delay=timedelta(minutes=10), max_attempts=3)
    def flaky(payload, ctx):
        calls.append(("flaky", payload, ctx))
        if ctx.attempt < payload["succeed_on"]:
            raise RuntimeError(f"attempt {ctx.attempt} fails")
        return ctx.attempt

    @q.task
    def remind(payload, ctx):
        calls.append(("remind", payload, ctx))
        if not payload.get("snoozed") and len([c for c in calls if c[0] == "remind"]) == 1:
            return ctx.snooze(timedelta(hours=1))
        return "reminded"

    @q.task(retry_delay=timedelta(minutes=10))  # a failed block is retried after every drain here
    def record(payload, ctx):
        with ctx.transaction() as session:
            session.execute(text("INSERT INTO effects (job_id, note) VALUES (:j, :n)"),
                            {"j": ctx.job_id, "n": payload["note"]})
            ctx.set_result("recorded")
            if payload.get("fail"):
                raise RuntimeError("inside the block")

    return q


@pytest.fixture
def effects(own_engine: Engine):
    """An application table (``effects``: job_id, note) and a reader of its rows."""
    with own_engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (id bigserial PRIMARY KEY, job_id bigint, note text)"))

    def rows() -> list[tuple]:
        with own_engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text("SELECT job_id, note FROM effects ORDER BY id"))]

    return rows


@pytest.fixture
def job_row(own_engine: Engine):
    def read(job_id: int):
        with own_engine.connect() as conn:
            return conn.execute(text("SELECT * FROM sqla_queue_jobs WHERE id = :id"), {"id": job_id}).one()

    return read
