"""Fixtures for migration tests: empty databases, a user-like shell, throwaway host apps.

Every test here gets databases of its own from ``create_database(migrate=False)``: migrations
commit (CONCURRENTLY cannot run in a transaction), so rollback isolation is not an option.
Host applications are written to ``tmp_path`` and driven through their real command lines.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from migration_helpers import (
    HOST_ENV,
    HOST_INI,
    HOST_JOB_MODEL,
    HOST_MODELS,
    HOST_NAMED_BASE,
    HOST_ORDERS_REVISION,
    HostApp,
    Shell,
)
from sqlalchemy import Engine, create_engine


@pytest.fixture
def empty_url(create_database) -> str:
    return create_database(migrate=False)


@pytest.fixture
def empty_engine(empty_url: str) -> Iterator[Engine]:
    engine = create_engine(empty_url)
    yield engine
    engine.dispose()


@pytest.fixture
def make_engine(create_database):
    """Factory: an engine on a new empty database; all disposed at teardown."""
    engines: list[Engine] = []

    def make() -> Engine:
        engines.append(create_engine(create_database(migrate=False)))
        return engines[-1]

    yield make
    for engine in engines:
        engine.dispose()


@pytest.fixture
def shell(tmp_path: Path, empty_url: str) -> Shell:
    return Shell(cwd=tmp_path, url=empty_url)


@pytest.fixture
def host_app(tmp_path: Path, shell: Shell):
    """Factory: a host application with its own Alembic env in tmp_path, on `empty_url`.

    ``queue_location`` is what the host adds to ``version_locations`` (None: nothing, the host
    does not use the queue's branch); ``job_model`` declares ``MyJob`` on the host's Base;
    ``naming_convention`` gives that Base a convention of its own.
    """

    def make(
        *, queue_location: str | None, job_model: bool = False, orders_revision: bool = True,
        naming_convention: bool = False,
    ) -> HostApp:
        app = HostApp(root=tmp_path, shell=shell)
        shell.run("alembic init migrations")  # the generic template: script.py.mako etc.
        locations = " ".join(filter(None, ["%(here)s/migrations/versions", queue_location]))
        app.write("alembic.ini", HOST_INI.format(version_locations=locations))
        app.write("migrations/env.py", HOST_ENV)
        app.write("hostapp/__init__.py", "")
        models = HOST_MODELS + (HOST_JOB_MODEL if job_model else "")
        if naming_convention:
            models = models.replace("    pass\n", HOST_NAMED_BASE, 1)
        app.write("hostapp/models.py", models)
        if orders_revision:
            app.write("migrations/versions/host_0001_orders.py", HOST_ORDERS_REVISION)
        return app

    return make
