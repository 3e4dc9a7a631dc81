"""Test helpers: conformance checks for plugin authors, and a real PostgreSQL to run tests on
(the same bootstrap sqla_queue's own tests, its demo and its benchmark use).

::

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
"""

from ._harness import ConformanceError
from .conformance import (
    BackoffReport,
    DedupeReport,
    LifecycleReport,
    check_backoff_plugin,
    check_dedupe_plugin,
    check_lifecycle_plugin,
)
from .database import (
    EmbeddedServer,
    embedded_server,
    embedded_tools_dir,
    migrated_database,
    server_url,
    start_embedded_server,
)

__all__ = [
    "BackoffReport",
    "ConformanceError",
    "DedupeReport",
    "EmbeddedServer",
    "LifecycleReport",
    "check_backoff_plugin",
    "check_dedupe_plugin",
    "check_lifecycle_plugin",
    "embedded_server",
    "embedded_tools_dir",
    "migrated_database",
    "server_url",
    "start_embedded_server",
]
