"""A real, migrated database, and the OpenTelemetry SDK with in-memory exporters installed as the
process's global providers (the entry point's `plugin` uses the global ones)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import Engine, create_engine

from sqla_queue.testing import migrated_database

try:
    import sqla_queue_opentelemetry  # noqa: F401  (the installed distribution, not the source tree)
except ImportError as exc:  # say how to fix it instead of a bare ModuleNotFoundError
    raise ImportError(
        "sqla-queue-opentelemetry is not installed: the README's test command installs it "
        "(or pip install ./plugins/sqla-queue-opentelemetry) before its tests"
    ) from exc

sys.path.insert(0, str(Path(__file__).parent))  # otel_sdk, and otel_app for the two-process tests

from otel_sdk import EXPORTER, READER


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    with migrated_database() as url:
        yield url


@pytest.fixture(scope="session")
def engine(database_url) -> Iterator[Engine]:
    engine = create_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def spans() -> InMemorySpanExporter:
    """The finished spans of this test (the exporter is emptied first)."""
    EXPORTER.clear()
    return EXPORTER


@pytest.fixture
def metric_reader() -> InMemoryMetricReader:
    return READER
