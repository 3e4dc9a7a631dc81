"""``db upgrade`` / ``db downgrade`` / ``db current``: the queue's Alembic branch, for applications
without an Alembic environment of their own (those run ``alembic upgrade heads`` instead)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click
from alembic.util import CommandError
from sqlalchemy import Connection

from . import EXIT_USAGE, CliContext, main
from .. import migrations
from .._engine import database_errors, make_engine


class MigrationError(click.ClickException):
    """Alembic refused the command (unknown revision, nothing to downgrade, foreign history)."""

    exit_code = EXIT_USAGE


@main.group()
def db() -> None:
    """Upgrade, downgrade or show the queue's schema (Alembic branch sqla_queue)."""


@db.command()
@click.argument("revision", default=migrations.HEAD)
@click.pass_obj
def upgrade(obj: CliContext, revision: str) -> None:
    """Upgrade the queue's schema to REVISION (default: sqla_queue@head)."""
    with _connection(obj) as conn:
        _refuse_foreign_history(conn)
        migrations.upgrade(conn, revision)
        click.echo(f"sqla_queue schema at {_describe(migrations.current(conn))}")


@db.command()
@click.argument("revision", default=migrations.PREVIOUS)
@click.pass_obj
def downgrade(obj: CliContext, revision: str) -> None:
    """Undo the queue's revisions down to REVISION (default: one step, sqla_queue@-1).

    sqla_queue@base drops the queue's table and every job in it.
    """
    with _connection(obj) as conn:
        _refuse_foreign_history(conn)
        if migrations.current(conn) is None:
            raise MigrationError("nothing to downgrade: the queue's schema is not installed")
        migrations.downgrade(conn, revision)
        click.echo(f"sqla_queue schema at {_describe(migrations.current(conn))}")


@db.command()
@click.pass_obj
def current(obj: CliContext) -> None:
    """Print the queue's revision in the database, or "none" before the first upgrade."""
    with _connection(obj) as conn:
        revision = migrations.current(conn)
        if revision is None:  # a host revision may depend on ours and hide it: we cannot tell
            _refuse_foreign_history(conn)
        click.echo(_describe(revision))


@contextmanager
def _connection(obj: CliContext) -> Iterator[Connection]:
    """A connection outside any transaction; Alembic errors become one line and exit 2."""
    engine = make_engine(obj.url())
    try:
        with database_errors(), engine.connect() as conn:
            yield conn
    except CommandError as exc:
        raise MigrationError(str(exc)) from None
    finally:
        engine.dispose()


def _refuse_foreign_history(conn: Connection) -> None:
    """The bundled environment knows only our revisions: Alembic would fail on the others, and
    a host revision that depends on ours hides where our branch stands."""
    foreign = migrations.foreign_revisions(conn)
    if foreign:
        raise MigrationError(
            f"alembic_version holds {', '.join(foreign)}, from your application's own Alembic "
            "history: use its `alembic current` / `alembic upgrade heads`, with "
            f"{migrations.VERSION_RESOURCE} in its version_locations "
            "(docs/how-to/alembic-integration.md)"
        )


def _describe(revision: str | None) -> str:
    if revision is None:
        return "none"
    head = migrations.script_directory().get_current_head()
    return f"{revision} (head)" if revision == head else revision
