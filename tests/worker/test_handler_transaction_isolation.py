"""The isolation level of ``ctx.transaction()``, as docs/explanation/delivery-semantics.md states
it: the default session runs at READ COMMITTED whatever the application engine's default; a
session factory's own level is kept; and at REPEATABLE READ a block fails with a serialization
failure once a lease renewal has updated the job's row after the block's first statement (the
attempt is retried, nothing it wrote commits)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, exc as sa_exc, text
from sqlalchemy.orm import sessionmaker
from sqlalchemy.pool import NullPool

import sqla_queue as sq

LOCKED_AT = text("SELECT locked_at FROM sqla_queue_jobs WHERE id = :id")


@pytest.fixture
def app_engine(create_database):
    """The application's engine, defaulting to SERIALIZABLE, on a database of the test's own
    with an effects table."""
    engine = create_engine(create_database(), poolclass=NullPool, isolation_level="SERIALIZABLE")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (job_id bigint NOT NULL, attempt int NOT NULL)"))
    yield engine
    engine.dispose()


def drain(queue: sq.Queue, **options) -> None:
    queue.worker(poll_interval=0.05, **options).run(until_empty=True)


def test_the_default_session_reads_committed_and_a_factory_keeps_its_own_level(app_engine):
    queue = sq.Queue(app_engine, load_entrypoints=False)
    levels: dict[str, str] = {}

    @queue.task
    def default_session(payload, ctx):
        with ctx.transaction() as session:
            levels["default"] = session.execute(text("SHOW transaction_isolation")).scalar_one()

    @queue.task(session_factory=sessionmaker(app_engine.execution_options(isolation_level="REPEATABLE READ")))
    def own_session(payload, ctx):
        with ctx.transaction() as session:
            levels["factory"] = session.execute(text("SHOW transaction_isolation")).scalar_one()

    with app_engine.connect() as conn:
        assert conn.execute(text("SHOW transaction_isolation")).scalar_one() == "serializable"
    queue.enqueue(default_session, {})
    queue.enqueue(own_session, {})
    drain(queue)
    assert levels == {"default": "read committed", "factory": "repeatable read"}


def test_a_repeatable_read_block_fails_once_a_renewal_updated_the_job_row(app_engine):
    queue = sq.Queue(app_engine, load_entrypoints=False)
    errors: list[BaseException] = []

    @queue.task(session_factory=sessionmaker(app_engine.execution_options(isolation_level="REPEATABLE READ")),
                retry_delay=0)
    def write_effect(payload, ctx):
        try:
            with ctx.transaction() as session:
                session.execute(text("INSERT INTO effects (job_id, attempt) VALUES (:id, :attempt)"),
                                {"id": ctx.job_id, "attempt": ctx.attempt})  # the snapshot is taken
                if ctx.attempt == 1:
                    # Wait (reading on another connection) for the worker's next renewal of the lease.
                    claimed_at, give_up = locked_at(app_engine, ctx.job_id), time.monotonic() + 30
                    while locked_at(app_engine, ctx.job_id) == claimed_at:
                        assert time.monotonic() < give_up, "no lease renewal within 30 s"
                        time.sleep(0.02)
        except Exception as error:
            errors.append(error)
            raise

    job_id = queue.enqueue(write_effect, {})
    drain(queue, lease=timedelta(seconds=1))  # a renewal every third of a second

    # The first attempt fails; a later one may too, on a loaded machine, if a renewal lands
    # inside its short block (one every third of a second). Only the attempt that completed
    # left its effect.
    assert errors, "the renewal did not make the block fail"
    for error in errors:
        assert isinstance(error, sa_exc.OperationalError), error
        assert "could not serialize access" in str(error)
    job = queue.get_job(job_id)
    assert (job.status, job.attempts) == (sq.JobStatus.COMPLETED, len(errors) + 1)
    with app_engine.connect() as conn:
        assert conn.execute(text("SELECT job_id, attempt FROM effects")).all() == [(job_id, len(errors) + 1)]


def locked_at(engine, job_id: int):
    with engine.connect() as conn:
        return conn.execute(LOCKED_AT, {"id": job_id}).scalar_one()
