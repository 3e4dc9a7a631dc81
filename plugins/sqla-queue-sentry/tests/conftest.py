"""A database of each test's own (the ``sqla_queue_database_url`` fixture of sqla_queue's pytest
plugin: SQLA_QUEUE_TEST_DATABASE_URL's server, else an embedded PostgreSQL 18), and a Sentry
client whose transport collects envelopes instead of sending them anywhere."""

from __future__ import annotations

import importlib.metadata
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sentry_sdk
from sentry_sdk import Scope
from sentry_sdk.transport import Transport
from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import NullPool

try:  # the plugin reaches a Queue through its distribution's entry point, so that must be installed
    importlib.metadata.distribution("sqla-queue-sentry")
except importlib.metadata.PackageNotFoundError as exc:
    raise ImportError("sqla-queue-sentry is not installed: the README's test command installs it "
                      "(or pip install ./plugins/sqla-queue-sentry) before its tests") from exc

DSN = "https://public@sentry.invalid/1"
"""Parsed, never dialled: the transport below replaces the network."""


class CollectingTransport(Transport):
    """Keeps every envelope the client hands over (events, client reports)."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self.envelopes: list[Any] = []

    def capture_envelope(self, envelope: Any) -> None:
        self.envelopes.append(envelope)

    @property
    def events(self) -> list[dict[str, Any]]:
        """The error and message events, in the order they were sent."""
        return [item.payload.json for envelope in self.envelopes for item in envelope.items if item.type == "event"]

    def everything(self) -> str:
        """Every envelope item as text: what a payload value must never be found in."""
        return "\n".join(json.dumps(item.payload.json) if item.payload.json is not None
                         else item.payload.get_bytes().decode(errors="replace")
                         for envelope in self.envelopes for item in envelope.items)


@pytest.fixture
def engine(sqla_queue_database_url: str) -> Engine:
    """No pool: nothing stays connected to the test's database when it is dropped."""
    return create_engine(sqla_queue_database_url, poolclass=NullPool)


@pytest.fixture
def sentry() -> Iterator[CollectingTransport]:
    """``sentry_sdk.init()`` with its defaults (the logging integration among them), sending
    to a collecting transport; the client is closed and removed afterwards."""
    Scope.get_isolation_scope().clear()
    Scope.get_current_scope().clear()
    transport = CollectingTransport()
    sentry_sdk.init(dsn=DSN, transport=transport)
    try:
        yield transport
    finally:
        sentry_sdk.get_client().close()
        Scope.get_global_scope().set_client(None)
        Scope.get_isolation_scope().clear()


@pytest.fixture
def queue_name() -> str:
    return f"sentry-{uuid.uuid4().hex[:8]}"
