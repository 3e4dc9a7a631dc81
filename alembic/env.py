"""The maintainers' Alembic environment: the queue's own revisions against `sqla_queue.metadata`.

pyproject.toml's ``[tool.alembic]`` points here and at the packaged versions directory, so from
the repository root, with ``SQLA_QUEUE_DATABASE_URL`` set, ``alembic upgrade heads``, ``alembic
check`` and ``alembic revision --autogenerate`` work as they would in any project. Hosts never
use this file: they use their own environment, or the bundled one in sqla_queue/migrations/.
"""

import logging
import os

from alembic import context
from alembic.util import CommandError

import sqla_queue
from sqla_queue.db.engine import DATABASE_URL_ENV, make_engine

# Strict comparisons: a revision that differs from the models in a type or a server default
# must show up in `alembic check`, not in a user's autogenerate.
COMPARE = {"compare_type": True, "compare_server_default": True}


def database_url() -> str:
    url = os.environ.get(DATABASE_URL_ENV) or context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise CommandError(f"set {DATABASE_URL_ENV} to the database to migrate")
    return url


def run_offline() -> None:
    """``--sql``: print the DDL (autocommit blocks render as COMMIT ... BEGIN)."""
    context.configure(
        url=database_url().replace("postgresql://", "postgresql+psycopg://", 1),
        target_metadata=sqla_queue.metadata,
        literal_binds=True,
        transaction_per_migration=True,
        **COMPARE,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    engine = make_engine(database_url())
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=sqla_queue.metadata,
                transaction_per_migration=True,  # our revisions commit around CONCURRENTLY
                **COMPARE,
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


logging.basicConfig(level=logging.INFO, format="%(levelname)-5.5s [%(name)s] %(message)s")
if context.is_offline_mode():
    run_offline()
else:
    run_online()
