"""Test helpers for plugin authors: conformance checks and a real database to run them on.

::

    from sqla_queue.testing import check_backoff_plugin, migrated_database

    def test_my_backoff_conforms(engine):          # engine on migrated_database()
        report = check_backoff_plugin(my_backoff.plugin, engine)
        assert report.answers[1]

Each check raises `ConformanceError` (an AssertionError) naming the plugin, the hook and the
input that broke the contract. See docs/how-to/write-a-backoff-plugin.md.
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
from .database import migrated_database

__all__ = [
    "BackoffReport",
    "ConformanceError",
    "DedupeReport",
    "LifecycleReport",
    "check_backoff_plugin",
    "check_dedupe_plugin",
    "check_lifecycle_plugin",
    "migrated_database",
]
