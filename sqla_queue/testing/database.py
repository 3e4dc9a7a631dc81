"""A real PostgreSQL for tests, demos and benchmarks: sqla_queue's own suite, a plugin's suite,
``python -m sqla_queue.demo`` and ``python -m benchmarks`` all start here.

Plugin authors test against PostgreSQL, not a fake: the dedupe index, the claim and the retry
schedule are the database's behaviour. The server is chosen in this order:

1. ``SQLA_QUEUE_TEST_DATABASE_URL``: a server you run; new databases are created there and
   dropped afterwards.
2. ``SQLA_QUEUE_TESTCONTAINERS=1``: a ``postgres`` container started by testcontainers (needs a
   Docker engine; ``SQLA_QUEUE_TESTCONTAINERS_IMAGE`` picks the image, default postgres:18),
   stopped when the process exits.
3. Otherwise an embedded PostgreSQL 18 (``pip install 'sqla-queue[embedded]'``), started in a
   temporary directory and deleted when the process exits.

One server per process serves every call (each `migrated_database` still gets a database of its
own): several test suites in one pytest session start it once.

`embedded_server` is the other shape: a PostgreSQL 18 of its own on 127.0.0.1 TCP with the
settings asked for, for benchmarks and for tests that restart the server or cut its network.
"""

from __future__ import annotations

import atexit
import functools
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from .. import migrations
from ..errors import ConfigurationError
from ..sql.databases import CreateDatabase, DropDatabase
from ._embedded import EmbeddedServer, bin_dir, start, tcp_server

TEST_DATABASE_URL_ENV = "SQLA_QUEUE_TEST_DATABASE_URL"
TESTCONTAINERS_ENV = "SQLA_QUEUE_TESTCONTAINERS"
TESTCONTAINERS_IMAGE_ENV = "SQLA_QUEUE_TESTCONTAINERS_IMAGE"

__all__ = ["EmbeddedServer", "alembic_upgrade", "copied_database", "embedded_server", "embedded_tools_dir",
           "migrate_queue", "migrated_database", "server_url", "start_embedded_server"]


@contextmanager
def migrated_database(data_dir: str | Path | None = None, *, server: str | None = None,
                      migrate: bool | Callable[[str], None] = True) -> Iterator[str]:
    """Yield the URL of a new database with the queue's migrations applied; drop it on exit.

    :param data_dir: where an embedded server keeps its data (default: the process's shared
        server, see `server_url`). Ignored when ``SQLA_QUEUE_TEST_DATABASE_URL`` is set.
    :param server: a maintenance URL to create the database on instead (e.g. an
        `embedded_server`'s ``url``).
    :param migrate: False leaves the database empty, for tests of the migrations themselves;
        a callable ``migrate(url)`` builds the schema instead of the queue's migrations (an
        application's own Alembic history: `alembic_upgrade`).
    """
    if server is None:
        server = _embedded_on(data_dir) if data_dir and not os.environ.get(TEST_DATABASE_URL_ENV) \
            else server_url()
    server = _psycopg(server)
    name = _new_name()
    # No pool: a database held for a whole test session must not hold a server connection too.
    admin = create_engine(server, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as conn:
            conn.execute(CreateDatabase(name))
        url = make_url(server).set(database=name).render_as_string(hide_password=False)
        if callable(migrate):
            migrate(url)
        elif migrate:
            migrate_queue(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(DropDatabase(name))
        admin.dispose()


@contextmanager
def copied_database(template: str, *, server: str | None = None) -> Iterator[str]:
    """Yield the URL of a new database copied from database `template` (``CREATE DATABASE ...
    TEMPLATE``, a file copy: milliseconds where migrating takes a second); drop it on exit.

    Nobody may be connected to `template` while it is copied: a `migrated_database` whose URL
    no engine holds open is a good one. `server` as for `migrated_database` (default:
    `server_url`).
    """
    server = _psycopg(server or server_url())
    name = _new_name()
    admin = create_engine(server, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as conn:
            conn.execute(CreateDatabase(name, template=template))
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(DropDatabase(name))
        admin.dispose()


@functools.cache
def server_url() -> str:
    """The maintenance URL (``postgresql+psycopg``) of this process's test server, chosen as
    the module says; started on first use."""
    url = os.environ.get(TEST_DATABASE_URL_ENV)
    if url:
        return _psycopg(url)
    if os.environ.get(TESTCONTAINERS_ENV) == "1":
        return _psycopg(_container_url())
    # Our own mkdtemp, not pytest's tmp_path: pytest prunes old base temp directories when
    # another session starts, which would pull the data directory from under a running server.
    return start(Path(tempfile.mkdtemp(prefix="sqlaq-pg-")) / "data", keep=False, url_variable=TEST_DATABASE_URL_ENV)


def start_embedded_server(data_dir: str | Path, *, keep: bool = True) -> str:
    """Start (or reuse) the embedded PostgreSQL 18 on `data_dir`; return its maintenance URL.

    `keep=False` deletes the data directory when the process exits; the demo keeps it.
    """
    return start(data_dir, keep=keep)


@contextmanager
def embedded_server(settings: Mapping[str, str] | None = None) -> Iterator[EmbeddedServer]:
    """A new embedded PostgreSQL 18 of its own on 127.0.0.1 and a free port, PostgreSQL's
    defaults plus `settings` (``{"fsync": "off"}``); the caller may restart it. Stopped and
    deleted on exit. Its ``bin_dir`` holds ``pgbench``."""
    with tcp_server(settings) as server:
        yield server


def embedded_tools_dir() -> Path | None:
    """Where the embedded PostgreSQL keeps ``pgbench``, ``psql`` and ``pg_ctl`` (None when the
    wheel is not installed)."""
    return bin_dir()


def _embedded_on(data_dir: str | Path) -> str:
    return start(Path(data_dir) / "data", keep=False)


def _container_url() -> str:
    from testcontainers.postgres import PostgresContainer

    container = PostgresContainer(os.environ.get(TESTCONTAINERS_IMAGE_ENV, "postgres:18"),
                                  driver="psycopg")
    container.start()
    atexit.register(container.stop)
    return container.get_connection_url()


def _new_name() -> str:
    """``sqlaq_test_<pid>_<random>``: on a server several test runs share (pytest-xdist workers,
    parallel CI jobs), the process that made a database can be told, and a leak blamed."""
    return f"sqlaq_test_{os.getpid()}_{uuid.uuid4().hex[:12]}"


def _psycopg(url: str) -> str:
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgresql+psycopg2"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def alembic_upgrade(config: str | Path = "alembic.ini", revision: str = "heads", *,
                    url_variable: str | None = None) -> Callable[[str], None]:
    """``migrate(url)`` running an application's own ``alembic upgrade`` on `url`: for a
    project whose history holds the queue's schema (``sqla-queue alembic install``, or the
    queue's branch), so its test database is built the way production's is.

    The URL reaches the application's env.py as ``sqlalchemy.url`` (``config.get_main_option``,
    what Alembic's template reads) and, if `url_variable` names one, as that environment
    variable for the duration of the upgrade (an env.py that reads ``os.environ``). `config` is
    the path of ``alembic.ini`` (or a pyproject.toml with ``[tool.alembic]``), relative to the
    directory pytest runs in.
    """
    path = Path(config)

    def migrate(url: str) -> None:
        from alembic import command
        from alembic.config import Config as AlembicConfig

        if not path.is_file():
            raise ConfigurationError(
                f"alembic_upgrade: no Alembic configuration at {path.resolve()} (pass its path, "
                "relative to where pytest runs)"
            )
        alembic_config = AlembicConfig(toml_file=str(path)) if path.suffix == ".toml" else AlembicConfig(str(path))
        alembic_config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
        with _environment(url_variable, url):
            command.upgrade(alembic_config, revision)

    return migrate


@contextmanager
def _environment(name: str | None, value: str) -> Iterator[None]:
    if name is None:
        yield
        return
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def migrate_queue(url: str) -> None:
    """The queue's own revisions on `url`: the default `migrate` of `migrated_database`."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:  # the revisions commit on their own (CONCURRENTLY)
            migrations.upgrade(conn)
    finally:
        engine.dispose()
