"""Test harness: one real PostgreSQL server per test session, from the public bootstrap.

The server is the one `sqla_queue.testing.server_url` chooses (``SQLA_QUEUE_TEST_DATABASE_URL``,
``SQLA_QUEUE_TESTCONTAINERS=1``, else an embedded PostgreSQL 18); plugin suites, the demo and the
benchmark start theirs the same way. A database migrated with the packaged revisions is created
once per session and shared.

Most tests commit, as the library does (a claim, an outcome, a worker's round each commit on
their own), so committed data is the default:

* **Committed (the default).** ``queue`` is a Queue with two tasks (``send_email``, ``resize``
  on queue "images") on the session's database, whose job, queue and schedule tables are emptied
  before and after the test. ``make_queue(**overrides)`` is the one factory behind it: keyword
  arguments go to ``sq.Queue`` (``plugins=``, ``claim_order=``, ``testing=``, ``engine=``);
  ``tasks=False`` leaves the two tasks out. ``committed_queue`` is the same queue, by its old
  name.
* **Rolled back.** ``connection`` is a connection inside an outer transaction that is rolled
  back after the test; ``session`` is an ORM Session joined to it with
  ``join_transaction_mode="create_savepoint"`` (its commits and rollbacks are SAVEPOINTs).
  Enqueue with ``queue.enqueue(..., connection=connection)`` or ``session=session``: the test's
  writes never reach another test.

Waiting for something another thread or process does is `waiting.wait_until` (tests/waiting.py),
never a bare sleep.

A test that needs a schema or server state of its own (races, locks, large tables, migrations)
asks for ``create_database()``: a fresh migrated database, dropped at session end.

``count_jobs``, ``job_row`` and ``table_rows`` (tests/job_fixtures.py) read what the test sees:
through ``connection`` when the test uses it, otherwise committed data on a new connection.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.orm import Session

import sqla_queue as sq
from sqla_queue import testing

# Fixtures shared by several feature directories: event recording, row readers, clock moves
# (job_fixtures), and engines on a test's own database with a thread barrier (race_fixtures).
pytest_plugins = ["job_fixtures", "race_fixtures"]

# Tests whose result does not depend on the server's PostgreSQL version: no database at all, a
# server of their own (restarts, network faults), or a journey (docs, CLI, tutorial, Alembic
# tooling, the crash storm) that only needs *a* database and runs statements the other tests
# already run on every version. They get the ``server_independent`` marker; CI runs them on
# PostgreSQL 18 only (``-m "not server_independent"`` on the PostgreSQL 15 pass).
SERVER_INDEPENDENT = (
    "benchmarks/", "cli/", "docs/", "examples/",
    "sql/test_queue_statements.py", "sql/test_single_job_insert.py",
    "sql/test_operations_statements.py", "sql/test_session_statements.py", "test_architecture.py",
    "core/enqueue/test_payload_encoding.py", "model/",
    "core/validation/test_validate.py", "core/outcomes/test_backoff.py",
    "core/outcomes/test_last_error_text.py", "core/operations/test_operations_doc.py",
    "plugins/test_plugin_docs.py", "plugins/test_howto_examples.py",
    "migrations/test_revisions.py", "migrations/test_cli_db.py", "migrations/test_docs_alembic.py",
    "migrations/test_host_alembic.py", "migrations/test_host_install.py",
    "worker/test_proxy.py", "worker/test_connection_loss.py", "worker/test_network.py",
    "worker/test_long_job.py", "worker/test_crash.py", "worker/test_pgbouncer.py",
    "services/scheduling/test_ticks.py", "services/scheduling/test_declare.py",
    "services/scheduling/test_schedule_statements.py", "services/scheduling/test_cli_schedules.py",
    "services/scheduling/test_schedule_jobs_doc.py", "test_states.py", "testing/test_chaos_",
)
TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(TESTS) and \
                item.path.relative_to(TESTS).as_posix().startswith(SERVER_INDEPENDENT):
            item.add_marker(pytest.mark.server_independent)


@pytest.fixture(scope="session")
def server_url() -> str:
    """URL of a maintenance database on the chosen server (psycopg 3 driver)."""
    return testing.server_url()


@pytest.fixture(scope="session")
def create_database(server_url: str):
    """Factory: a new database on the test server (migrated unless ``migrate=False``); every
    one is dropped at session end."""
    with ExitStack() as databases:

        def create(migrate: bool = True) -> str:
            return databases.enter_context(testing.migrated_database(server=server_url, migrate=migrate))

        yield create


@pytest.fixture(scope="session")
def database_url(create_database) -> str:
    """The session's shared, migrated database."""
    return create_database()


@pytest.fixture
def own_database(create_database) -> Iterator[tuple[str, Engine]]:
    """A new migrated database and an engine on it, for tests that hold sessions open or need a
    server state of their own."""
    url = create_database()
    engine = create_engine(url, pool_size=5)
    yield url, engine
    engine.dispose()


@pytest.fixture(scope="session")
def engine(database_url: str) -> Iterator[Engine]:
    engine = create_engine(database_url, pool_size=12, max_overflow=20)
    yield engine
    engine.dispose()


# -- rolled back ----------------------------------------------------------------------------


@pytest.fixture
def connection(engine: Engine) -> Iterator[Connection]:
    """A connection in an outer transaction that is rolled back after the test."""
    with engine.connect() as conn:
        outer = conn.begin()
        try:
            yield conn
        finally:
            outer.rollback()


@pytest.fixture
def session(connection: Connection) -> Iterator[Session]:
    """An ORM Session inside ``connection``'s transaction: ``commit()`` releases a SAVEPOINT,
    the outer transaction still rolls everything back."""
    with Session(bind=connection, join_transaction_mode="create_savepoint") as orm_session:
        yield orm_session


def _with_tasks(q: sq.Queue) -> sq.Queue:
    @q.task
    def send_email(payload, ctx):  # pragma: no cover - run by worker tests
        return None

    @q.task(queue="images", max_attempts=2)
    def resize(payload, ctx):  # pragma: no cover
        return None

    return q


@pytest.fixture
def make_queue(engine: Engine):
    """The one queue factory: ``make_queue(**overrides)`` -> a Queue on the session's engine with
    built-in plugins only and ``send_email``/``resize`` registered (``tasks=False``: none)."""

    def make(*, tasks: bool = True, **overrides) -> sq.Queue:
        overrides.setdefault("load_entrypoints", False)
        built = sq.Queue(overrides.pop("engine", engine), **overrides)
        return _with_tasks(built) if tasks else built

    return make


# -- committed: the default -----------------------------------------------------------------


@pytest.fixture
def clean_jobs(engine: Engine) -> Iterator[None]:
    """An empty job table before the test (ids from 1), and again after it, so committed rows
    never reach another test. Both under a lock timeout: a transaction the test leaked is named
    by the error instead of hanging the run. Afterwards a DELETE, not a TRUNCATE: it does not
    wait for a fixture that is still reading the table."""
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL lock_timeout = '30s'"))
        conn.execute(text("TRUNCATE sqla_queue_jobs, sqla_queue_jobs_queues, sqla_queue_jobs_schedules, "
                          "sqla_queue_jobs_limits, sqla_queue_jobs_group_rates, sqla_queue_jobs_dependencies RESTART IDENTITY"))
    yield
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL lock_timeout = '30s'"))
        conn.execute(text("DELETE FROM sqla_queue_jobs"))
        conn.execute(text("DELETE FROM sqla_queue_jobs_queues"))
        conn.execute(text("DELETE FROM sqla_queue_jobs_schedules"))
        conn.execute(text("DELETE FROM sqla_queue_jobs_limits"))
        conn.execute(text("DELETE FROM sqla_queue_jobs_group_rates"))
        conn.execute(text("DELETE FROM sqla_queue_jobs_dependencies"))


@pytest.fixture
def queue(make_queue, clean_jobs: None) -> sq.Queue:
    """The default queue: committed data, on emptied tables (see the module docstring)."""
    return make_queue()


@pytest.fixture
def committed_queue(queue: sq.Queue) -> sq.Queue:
    """`queue`, by the name tests used when committed data was not yet the default."""
    return queue


@pytest.fixture
def read_jobs(request: pytest.FixtureRequest, engine: Engine):
    """Context manager: a connection that sees what the test sees (see the module docstring)."""

    @contextmanager
    def reader() -> Iterator[Connection]:
        if "connection" in request.fixturenames:
            yield request.getfixturevalue("connection")
            return
        with engine.connect() as conn:
            yield conn

    return reader


@pytest.fixture
def count_jobs(read_jobs):
    def count(where: str = "true") -> int:
        with read_jobs() as conn:
            return conn.execute(text(f"SELECT count(*) FROM sqla_queue_jobs WHERE {where}")).scalar_one()

    return count


@pytest.fixture(autouse=True)
def _fresh_completion_budget(monkeypatch):
    """Each test starts with this second's budget of completion log records unspent (it is
    per process, and tests in one process may follow each other within a second)."""
    from sqla_queue.plugins.builtins import logging as builtin_logging

    monkeypatch.setattr(builtin_logging, "completion_budget",
                        builtin_logging.CompletionBudget(builtin_logging.COMPLETIONS_PER_SECOND))
