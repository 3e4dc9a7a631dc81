"""docs/how-to/error-reporting.md, run as written: every ``python`` block in page order, in one
namespace, against a fresh migrated database named by ``SQLA_QUEUE_DATABASE_URL``, with no
``SENTRY_DSN`` (the page's first ``sentry_sdk.init()`` then sends nothing); what it prints is
the ``text`` block the page shows."""

from __future__ import annotations

import re
from pathlib import Path

import sentry_sdk
from sentry_sdk import Scope

import sqla_queue as sq

DOC = Path(__file__).resolve().parents[3] / "docs" / "how-to" / "error-reporting.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)


def test_the_page_runs_as_written_and_prints_what_it_shows(sqla_queue_database_url, monkeypatch, capsys):
    monkeypatch.delenv("SENTRY_DSN", raising=False)
    monkeypatch.delenv("SQLA_QUEUE_SENTRY_RETRIES", raising=False)
    namespace: dict = {"__name__": "error_reporting_doc"}
    Scope.get_isolation_scope().clear()
    monkeypatch.setenv("SQLA_QUEUE_DATABASE_URL", sqla_queue_database_url)
    try:
        for number, block in enumerate(blocks("python"), start=1):
            exec(compile(block, f"error-reporting.md (python block {number})", "exec"), namespace)
    finally:
        sentry_sdk.get_client().close()
        Scope.get_global_scope().set_client(None)
        Scope.get_isolation_scope().clear()
        queue = namespace.get("queue")
        if isinstance(queue, sq.Queue):
            queue.engine.dispose()
    (shown,) = blocks("text")
    assert capsys.readouterr().out == shown
    assert namespace["reporter"].retries == "warning"
    assert namespace["queue"].plugin_manager.get_plugin("sentry") is not None
