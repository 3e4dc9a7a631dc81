"""A real, migrated database for this plugin's tests (sqla_queue.testing picks the server:
SQLA_QUEUE_TEST_DATABASE_URL, else an embedded PostgreSQL 18)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine

from sqla_queue.testing import migrated_database

try:
    import sqla_queue_prometheus  # noqa: F401  (the installed distribution, not the source tree)
except ImportError as exc:  # say how to fix it instead of a bare ModuleNotFoundError
    raise ImportError(
        "sqla-queue-prometheus is not installed: the README's test command installs it "
        "(or pip install ./plugins/sqla-queue-prometheus) before its tests"
    ) from exc


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    with migrated_database() as url:
        engine = create_engine(url)
        yield engine
        engine.dispose()
