"""A real, migrated PostgreSQL database for a plugin's own test suite.

Plugin authors test against PostgreSQL, not a fake: the dedupe index, the claim and the retry
schedule are the database's behaviour. `migrated_database` gives them one with the same
server choice as sqla_queue's own tests:

1. ``SQLA_QUEUE_TEST_DATABASE_URL``: a server you run; a fresh database is created there and
   dropped afterwards.
2. Otherwise an embedded PostgreSQL 18 (``pip install 'sqla-queue[embedded]'``), started in a
   temporary directory and deleted when the process exits. One server per process serves
   every `migrated_database` call (each still gets its own database): several plugin test
   suites in one pytest session start it once.
"""

from __future__ import annotations

import functools
import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from .. import _embedded, migrations

TEST_DATABASE_URL_ENV = "SQLA_QUEUE_TEST_DATABASE_URL"


@contextmanager
def migrated_database(data_dir: str | Path | None = None) -> Iterator[str]:
    """Yield the URL of a new database with the queue's migrations applied; drop it on exit.

    :param data_dir: where an embedded server keeps its data (default: the process's shared
        server in a temporary directory). Ignored when ``SQLA_QUEUE_TEST_DATABASE_URL`` is set.
    """
    server = _server_url(data_dir)
    name = f"sqlaq_plugin_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            # Identifiers cannot be bound parameters; `name` is ours, built just above.
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        url = make_url(server).set(database=name).render_as_string(hide_password=False)
        _migrate(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def _server_url(data_dir: str | Path | None) -> str:
    url = os.environ.get(TEST_DATABASE_URL_ENV)
    if not url:
        return _embedded.start(Path(data_dir) / "data", keep=False) if data_dir else _process_server()
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgresql+psycopg2"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


@functools.cache
def _process_server() -> str:
    """The embedded server shared by this process. Its directory is our own ``mkdtemp``, not
    pytest's ``tmp_path``: pytest prunes old base temp directories when another session
    starts, which would pull the data directory from under a running server."""
    return _embedded.start(Path(tempfile.mkdtemp(prefix="sqlaq-pg-")) / "data", keep=False)


def _migrate(url: str) -> None:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            migrations.upgrade(conn)
    finally:
        engine.dispose()
