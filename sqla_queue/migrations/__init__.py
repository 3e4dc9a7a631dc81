"""The queue's Alembic revisions, shipped inside the package as the ``sqla_queue`` branch.

A host with its own Alembic environment adds `VERSION_LOCATION` to its ``version_locations``
and runs ``alembic upgrade heads``. Without one, `upgrade` (and ``sqla-queue db upgrade``) runs
the bundled environment against a connection. Revision files here import only alembic and
sqlalchemy, never ``sqla_queue.models``: they are frozen history.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection

BRANCH_LABEL = "sqla_queue"
SCRIPT_LOCATION = str(Path(__file__).resolve().parent)
VERSION_LOCATION = str(Path(__file__).resolve().parent / "versions")
HEAD = f"{BRANCH_LABEL}@head"


def alembic_config(connection: Connection) -> Config:
    """An Alembic Config for the bundled environment, running on `connection`."""
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.set_main_option("version_locations", VERSION_LOCATION)
    config.attributes["connection"] = connection
    return config


def upgrade(connection: Connection, revision: str = HEAD) -> None:
    command.upgrade(alembic_config(connection), revision)


def downgrade(connection: Connection, revision: str = f"{BRANCH_LABEL}@base") -> None:
    command.downgrade(alembic_config(connection), revision)
