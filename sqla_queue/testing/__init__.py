"""Test helpers: for an application's own handlers, conformance checks for plugin authors, and
a real PostgreSQL to run tests on (the same bootstrap sqla_queue's own tests, its demo and its
benchmark use).

For handlers (`handlers`, docs/how-to/test-your-handlers.md): `enqueued` (the pending jobs that
match, for ``assert``), `drain` / `drain_async` (run due jobs in the test as a worker would,
``advance=`` moving due times back in the database), `run_job` (one handler with a real
context), and inline mode (``Queue(..., testing="inline")``, `inline`). The pytest plugin
(`pytest_plugin`, loaded through the ``pytest11`` entry point) gives each test a fresh database:
the fixture ``sqla_queue_database_url``.

For plugin authors::

    from sqla_queue.testing import check_backoff_plugin, migrated_database

    def test_my_backoff_conforms(engine):          # engine on migrated_database()
        report = check_backoff_plugin(my_backoff.plugin, engine)
        assert report.answers[1]

Each check raises `ConformanceError` (an AssertionError) naming the plugin, the hook and the
input that broke the contract. See docs/how-to/write-a-backoff-plugin.md.

`migrated_database` gives a new migrated database on the test server that `server_url` chooses
(``SQLA_QUEUE_TEST_DATABASE_URL``, ``SQLA_QUEUE_TESTCONTAINERS=1``, else an embedded PostgreSQL
18); `embedded_server` starts a PostgreSQL 18 of its own on 127.0.0.1 TCP with given settings;
`start_embedded_server` starts (or reuses) one on a data directory you keep.

`bind` points an application's module-level queue and sessionmakers at a test's database;
`alembic_upgrade` builds a test database with the application's own Alembic history (the
pytest plugin's ``sqla_queue_migrate`` fixture).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Imported on first use (PEP 562): pytest imports this package in every session through the
# plugin (``sqla_queue.testing.pytest_plugin``), which must cost next to nothing.
_EXPORTS = {
    "ConformanceError": "_harness",
    "BackoffReport": "conformance",
    "DedupeReport": "conformance",
    "LifecycleReport": "conformance",
    "check_backoff_plugin": "conformance",
    "check_dedupe_plugin": "conformance",
    "check_lifecycle_plugin": "conformance",
    "MetaReport": "conformance",
    "MiddlewareReport": "conformance",
    "check_meta_plugin": "conformance",
    "check_run_middleware": "conformance",
    "EmbeddedServer": "database",
    "alembic_upgrade": "database",
    "bind": "binding",
    "migrate_queue": "database",
    "copied_database": "database",
    "embedded_server": "database",
    "embedded_tools_dir": "database",
    "migrated_database": "database",
    "server_url": "database",
    "start_embedded_server": "database",
    "DrainLimitError": "handlers",
    "Enqueued": "handlers",
    "InlineLimitError": ".worker.inline",
    "Ran": "handlers",
    "drain": "handlers",
    "drain_async": "handlers",
    "enqueued": "handlers",
    "run_job": "handlers",
}

__all__ = [
    "alembic_upgrade",
    "bind",
    "migrate_queue",
    "BackoffReport",
    "ConformanceError",
    "DedupeReport",
    "DrainLimitError",
    "EmbeddedServer",
    "Enqueued",
    "InlineLimitError",
    "LifecycleReport",
    "MetaReport",
    "MiddlewareReport",
    "Ran",
    "check_backoff_plugin",
    "check_dedupe_plugin",
    "check_lifecycle_plugin",
    "check_meta_plugin",
    "check_run_middleware",
    "copied_database",
    "drain",
    "drain_async",
    "embedded_server",
    "embedded_tools_dir",
    "enqueued",
    "migrated_database",
    "run_job",
    "server_url",
    "start_embedded_server",
]

if TYPE_CHECKING:
    from ..worker.inline import InlineLimitError
    from ._harness import ConformanceError
    from .binding import bind
    from .conformance import (
        BackoffReport,
        DedupeReport,
        LifecycleReport,
        MetaReport,
        MiddlewareReport,
        check_backoff_plugin,
        check_dedupe_plugin,
        check_lifecycle_plugin,
        check_meta_plugin,
        check_run_middleware,
    )
    from .database import (
        EmbeddedServer,
        alembic_upgrade,
        copied_database,
        embedded_server,
        embedded_tools_dir,
        migrate_queue,
        migrated_database,
        server_url,
        start_embedded_server,
    )
    from .handlers import DrainLimitError, Enqueued, Ran, drain, drain_async, enqueued, run_job


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sqla_queue.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
