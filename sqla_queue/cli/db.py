"""``db upgrade`` / ``db downgrade`` / ``db current``: the queue's Alembic branch, for applications
without an Alembic environment of their own (those run ``alembic upgrade head`` after
``sqla-queue alembic install``, or ``alembic upgrade heads`` with the queue's branch).

``db current`` also reads such a host's history (``--config``) to say where the queue stands."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import click
from alembic.util import CommandError
from sqlalchemy import Connection, inspect

from .. import migrations
from ..db.engine import database_errors, make_engine
from ..migrations import host
from ..ops import storage
from ..sql.history import relkind
from ..tables import job_table_of
from ._params import DURATION, DURATION_HELP
from .root import EXIT_USAGE, CliContext, main

_CONFIG = click.option(
    "-c", "--config", "config_path", default="alembic.ini", show_default=True, metavar="PATH",
    help="Your project's Alembic configuration, if it has one (read when it exists).",
)


class MigrationError(click.ClickException):
    """Alembic refused the command (unknown revision, nothing to downgrade, foreign history)."""

    exit_code = EXIT_USAGE


@main.group()
def db() -> None:
    """Upgrade, downgrade or show the queue's schema (Alembic branch sqla_queue)."""


@db.command()
@click.argument("revision", default=migrations.HEAD)
@_CONFIG
@click.pass_obj
def upgrade(obj: CliContext, revision: str, config_path: str) -> None:
    """Upgrade the queue's schema to REVISION (default: sqla_queue@head)."""
    with _connection(obj) as conn:
        _refuse_foreign_history(conn)
        _refuse_installed(conn, config_path)
        migrations.upgrade(conn, revision)
        click.echo(f"sqla_queue schema at {_describe_database(conn)}")


@db.command()
@click.argument("revision", default=migrations.PREVIOUS)
@_CONFIG
@click.pass_obj
def downgrade(obj: CliContext, revision: str, config_path: str) -> None:
    """Undo the queue's revisions down to REVISION (default: one step, sqla_queue@-1).

    sqla_queue@base drops the queue's table and every job in it.
    """
    with _connection(obj) as conn:
        _refuse_foreign_history(conn)
        _refuse_installed(conn, config_path)
        if migrations.current(conn) is None:
            raise MigrationError("nothing to downgrade: the queue's schema is not installed")
        migrations.downgrade(conn, revision)
        click.echo(f"sqla_queue schema at {_describe_database(conn)}")


@db.command()
@_CONFIG
@click.pass_obj
def current(obj: CliContext, config_path: str) -> None:
    """Print the queue's revision in the database, or "none" before the first upgrade.

    In a database with your own Alembic history, that history (--config) says which of its
    revisions brought the queue's schema (`sqla-queue alembic install`).
    """
    with _connection(obj) as conn:
        revision = migrations.current(conn)
        foreign = migrations.foreign_revisions(conn)
        if revision is None and foreign:
            click.echo(_describe(_through_host(foreign, config_path)))
        else:
            click.echo(_describe_database(conn))


@db.command("partition-history")
@click.option("--lock-timeout", type=DURATION, default="5s", show_default=True,
              help=f"Give up a step that cannot get its lock within this long; nothing of it is done. {DURATION_HELP}")
@click.pass_obj
def partition_history(obj: CliContext, lock_timeout: timedelta) -> None:
    """Move finished jobs out of the claim's table: partition the job table by archived, online.

    Workers keep running; from then on they archive finished jobs into day partitions, and
    retention drops whole days (docs/explanation/storage.md). The same as `db upgrade
    sqla_queue_partitioned@head`, recorded in alembic_version, so `db downgrade
    sqla_queue_partitioned@base` turns it back. A database whose queue schema came from your
    own Alembic history is converted without a record (see the page for the revision's way).
    """
    with _connection(obj) as conn:
        if migrations.foreign_revisions(conn) or migrations.current(conn) is None:
            done = storage.partition_history(conn.engine, lock_timeout=lock_timeout)
        else:
            done = migrations.partitioned_revision(conn) is None and not _partitioned(conn)
            migrations.upgrade(conn, migrations.PARTITIONED_HEAD, lock_timeout=lock_timeout)
    click.echo("job table partitioned: finished jobs now go to day partitions of its history" if done
               else "job table already partitioned: nothing to do")


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
            "history: upgrade with it, `alembic upgrade head` (after `sqla-queue alembic "
            f"install`) or `alembic upgrade heads` (with {migrations.VERSION_RESOURCE} in its "
            "version_locations); see docs/how-to/alembic-integration.md"
        )


def _through_host(foreign: list[str], config_path: str) -> str | None:
    """The queue's schema at the host revisions stamped in the database, read from the host's
    history; without that history (no --config) we cannot tell, and say so."""
    if not Path(config_path).is_file():
        raise MigrationError(
            f"alembic_version holds {', '.join(foreign)}, from your application's own Alembic "
            f"history, and there is no {config_path}: pass --config path/to/alembic.ini "
            "(or ask your `alembic current`)"
        )
    try:
        return host.schema_at(host.host_scripts(host.host_config(config_path)), tuple(foreign))
    except CommandError as exc:
        raise MigrationError(str(exc)) from None


def _refuse_installed(conn: Connection, config_path: str) -> None:
    """A project that copied the queue's schema into its own history (``sqla-queue alembic
    install``) upgrades it with ``alembic upgrade head``: a second, stamped copy from the
    bundled branch would break that history. Seen from its configuration (when there is one)
    or from the queue's table existing with no revision of ours recorded."""
    if Path(config_path).is_file():
        try:
            brought = host.installed(host.host_scripts(host.host_config(config_path)))
        except CommandError as exc:
            raise MigrationError(str(exc)) from None
        if brought is not None:
            raise MigrationError(
                f"{config_path}'s history brings the queue's schema (up to {brought}, from "
                "`sqla-queue alembic install`): run `alembic upgrade head` instead"
            )
    if migrations.current(conn) is None and _has_jobs_table(conn):
        raise MigrationError(
            "the database has sqla_queue_jobs but alembic_version records no revision of the "
            "queue's: it came from your own Alembic history (`sqla-queue alembic install`); "
            "run its `alembic upgrade head` instead"
        )


def _has_jobs_table(conn: Connection) -> bool:
    began = not conn.in_transaction()
    try:
        return inspect(conn).has_table("sqla_queue_jobs")
    finally:
        if began:
            conn.rollback()


def _partitioned(conn: Connection) -> bool:
    began = not conn.in_transaction()
    try:
        return conn.execute(relkind(job_table_of(None))).scalar() == "p"
    finally:
        if began:
            conn.rollback()


def _describe_database(conn: Connection) -> str:
    """The ``sqla_queue`` revision, and the opt-in partitioned layout's when it is applied."""
    described = _describe(migrations.current(conn))
    layout = migrations.partitioned_revision(conn)
    return described if layout is None else f"{described}, partitioned layout {layout}"


def _describe(revision: str | None) -> str:
    if revision is None:
        return "none"
    head = migrations.script_directory().get_current_head()
    return f"{revision} (head)" if revision == head else revision
