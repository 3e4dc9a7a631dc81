"""The pytest plugin for applications that use sqla_queue: a fresh, migrated PostgreSQL database
for each test.

Installed with sqla_queue (the ``pytest11`` entry point ``sqla_queue``), so an application's
tests ask for the fixtures by name, without a conftest.py::

    def test_placing_an_order_enqueues_a_receipt(sqla_queue_database_url):
        engine = create_engine(sqla_queue_database_url)
        ...

Fixtures:

``sqla_queue_server_url`` (session)
    The maintenance URL of the test server, chosen as `sqla_queue.testing.server_url` says:
    ``SQLA_QUEUE_TEST_DATABASE_URL``, else a testcontainers PostgreSQL when
    ``SQLA_QUEUE_TESTCONTAINERS=1``, else an embedded PostgreSQL 18 (``pip install
    'sqla-queue[embedded]'``). Started on first use, once per session.
``sqla_queue_migrate`` (session)
    What builds the template's schema: a callable ``migrate(url)``, by default the queue's own
    revisions (`sqla_queue.testing.migrate_queue`). An application whose Alembic history holds
    the queue's schema overrides it in its conftest.py with
    ``sqla_queue.testing.alembic_upgrade("alembic.ini")``, so its tables and ``alembic_version``
    are what production's ``alembic upgrade head`` makes.
``sqla_queue_template_database`` (session)
    The name of a database migrated once per session (by ``sqla_queue_migrate``), the template
    every test's database is copied from.
``sqla_queue_database_url`` (function)
    The URL (``postgresql+psycopg``) of a new database with the queue's schema, a copy of the
    template (``CREATE DATABASE ... TEMPLATE``: no migration per test), dropped when the test
    ends. The application's own tables are the test's to create (``metadata.create_all``),
    unless ``sqla_queue_migrate`` built them.

Importing this module starts nothing and needs no server: pytest imports it in every session
of every project that has sqla_queue installed. Everything else is imported when a fixture is
first used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest


@pytest.fixture(scope="session")
def sqla_queue_server_url() -> str:
    """The maintenance URL of this session's test server (see the module docstring)."""
    from sqla_queue.testing.database import server_url

    return server_url()


@pytest.fixture(scope="session")
def sqla_queue_migrate() -> Callable[[str], None]:
    """Builds the template database's schema; override it to run your own Alembic history."""
    from sqla_queue.testing.database import migrate_queue

    return migrate_queue


@pytest.fixture(scope="session")
def sqla_queue_template_database(sqla_queue_server_url: str, sqla_queue_migrate: Callable[[str], None]) -> Iterator[str]:
    """A database migrated once per session; each test's database is a copy of it."""
    from sqlalchemy.engine import make_url

    from sqla_queue.testing.database import migrated_database

    with migrated_database(server=sqla_queue_server_url, migrate=sqla_queue_migrate) as url:
        yield make_url(url).database  # type: ignore[misc]


@pytest.fixture
def sqla_queue_database_url(sqla_queue_server_url: str, sqla_queue_template_database: str) -> Iterator[str]:
    """A new database with the queue's schema applied, for this test alone; dropped afterwards."""
    from sqla_queue.testing.database import copied_database

    with copied_database(sqla_queue_template_database, server=sqla_queue_server_url) as url:
        yield url
