"""Setup for the plugin-system tests: Queues with and without entry points, the database
clock, and a quick worker run.

Entry-point tests need the distributions in plugins/ installed in the test environment
(the README's test command installs them). They are not skipped without them: a
missing plugin is a failure of the setup this suite exists to prove.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import fields
from datetime import datetime, timedelta

import pytest
from sqlalchemy import Engine, func, select

import sqla_queue as sq
from sqla_queue.plugins.manager import BLOCKED_PLUGINS_ENV, DISABLE_AUTOLOAD_ENV, ENABLED_PLUGINS_ENV
from sqla_queue.worker.worker import WorkerSummary

FAST_WORKER = {"poll_interval": 0.05, "lease": timedelta(seconds=10), "listen": False, "concurrency": 2}


@pytest.fixture(autouse=True)
def no_plugin_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's shell may enable or block plugins or turn autoloading off; these tests decide."""
    monkeypatch.delenv(ENABLED_PLUGINS_ENV, raising=False)
    monkeypatch.delenv(BLOCKED_PLUGINS_ENV, raising=False)
    monkeypatch.delenv(DISABLE_AUTOLOAD_ENV, raising=False)


@pytest.fixture
def installed_queue(engine: Engine, clean_jobs: None) -> Callable[..., sq.Queue]:
    """Factory: a Queue with the installed entry points loaded, on an empty table."""

    def build(**options) -> sq.Queue:
        return sq.Queue(engine, load_entrypoints=True, **options)

    return build


@pytest.fixture
def db_now(engine: Engine) -> Callable[[], datetime]:
    """The database's clock, which decides run_at."""

    def now() -> datetime:
        with engine.connect() as conn:
            return conn.execute(select(func.clock_timestamp())).scalar_one()

    return now


@pytest.fixture
def drain() -> Callable[..., WorkerSummary]:
    """Run workers until a run claims nothing: the end-to-end path, not the Queue API alone.

    One ``run(until_empty=True)`` can end just as a retry with no delay falls due (it saw an
    empty claim while the failing job was still held); the next run picks that retry up. The
    summaries are added up.
    """

    def run(queue: sq.Queue, *queues: str) -> WorkerSummary:
        runs = [queue.worker(queues=list(queues), **FAST_WORKER).run(until_empty=True)]
        while runs[-1].claimed:
            runs.append(queue.worker(queues=list(queues), **FAST_WORKER).run(until_empty=True))
        return WorkerSummary(**{f.name: sum(getattr(r, f.name) for r in runs) for f in fields(WorkerSummary)})

    return run


@pytest.fixture
def library_logger():
    """The ``sqla_queue`` logger at the level a test sets, put back afterwards."""
    logger = logging.getLogger("sqla_queue")
    before = logger.level
    yield logger
    logger.setLevel(before)
