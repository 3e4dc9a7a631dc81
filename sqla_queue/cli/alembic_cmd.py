"""``alembic install`` / ``alembic update``: the queue's schema as revisions of the host's own
Alembic history, so ``alembic revision`` and ``alembic upgrade head`` keep working unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click
from alembic.util import CommandError
from sqlalchemy.exc import OperationalError

from .. import migrations
from ..db.engine import make_engine
from ..migrations import host
from ..sql.databases import relation_exists
from .db import MigrationError
from .root import CliContext, main

_CONFIG = click.option(
    "-c", "--config", "config_path", default="alembic.ini", show_default=True, metavar="PATH",
    help="Your project's Alembic configuration.",
)
_TO = click.option(
    "--to", metavar="REVISION", default=None,
    help="Bring the queue's schema only up to this revision (default: the newest this sqla_queue has).",
)
_REV_ID = click.option("--rev-id", default=None, help="Id for the new revision (default: Alembic's random one).")
_MESSAGE = click.option("-m", "--message", default=None, help="Message (and file name slug) of the new revision.")
_VERSION_PATH = click.option(
    "--version-path", default=None, metavar="DIR",
    help="Versions directory for the new revision, if your project has several.",
)


@main.group("alembic")
def alembic_group() -> None:
    """Write the queue's schema into your own Alembic history (a project with Alembic)."""


@alembic_group.command()
@_CONFIG
@_TO
@_REV_ID
@_MESSAGE
@_VERSION_PATH
@click.option("--force", is_flag=True,
              help="Write the revision even if env.py's target_metadata leaves the queue's tables out (warns).")
@click.pass_obj
def install(
    obj: CliContext, config_path: str, to: str | None, rev_id: str | None, message: str | None,
    version_path: str | None, force: bool,
) -> None:
    """Write one revision creating the queue's schema, on your history's head.

    Then `alembic upgrade head` applies it. The revision imports only alembic and sqlalchemy:
    review it and commit it like any of yours. Refuses an env.py whose target_metadata leaves
    the queue's tables out: the next `alembic revision --autogenerate` would drop them.
    """
    with _host_errors():
        config = host.host_config(config_path)
        scripts = host.host_scripts(config)
        _refuse_branch(scripts, "install")
        done = host.installed(scripts)
        if done is not None:
            raise MigrationError(
                f"the queue's schema is already in your history (up to {done}): "
                "`sqla-queue alembic update` brings it up to date"
            )
        _refuse_stamped_database(obj)
        _check_env(config, scripts, force)
        target = to or _library_head()
        script = host.write(
            config, after=None, to=target, rev_id=rev_id, version_path=version_path,
            message=message or f"install sqla_queue schema {target}",
        )
    _report(script, target)


@alembic_group.command()
@_CONFIG
@_TO
@_REV_ID
@_MESSAGE
@_VERSION_PATH
@click.pass_obj
def update(
    obj: CliContext, config_path: str, to: str | None, rev_id: str | None, message: str | None,
    version_path: str | None,
) -> None:
    """Write the next revision, bringing the queue's schema to this sqla_queue's newest.

    Says so (exit 0) and writes nothing when your history is already there.
    """
    with _host_errors():
        config = host.host_config(config_path)
        scripts = host.host_scripts(config)
        _refuse_branch(scripts, "update")
        done = host.installed(scripts)
        if done is None:
            raise MigrationError("the queue's schema is not in your history yet: run `sqla-queue alembic install`")
        target = to or _library_head()
        if done == target:
            click.echo(f"sqla_queue schema is up to date in your history ({target})")
            return
        _refuse_unknown(done)
        script = host.write(
            config, after=done, to=target, rev_id=rev_id, version_path=version_path,
            message=message or f"update sqla_queue schema to {target}",
        )
    _report(script, target)


def _check_env(config, scripts, force: bool) -> None:
    """Refuse (with `force`, warn about) an env.py whose autogenerate would drop the queue's
    tables; note when it does not pass the queue's guard."""
    try:
        options = host.env_options(config, scripts)
    except CommandError as exc:
        _refuse_or_warn(str(exc), force)
        return
    missing = host.unprotected_queue_tables(options)
    if missing:
        _refuse_or_warn(
            f"your env.py's target_metadata leaves out the queue's tables ({', '.join(missing)}): the next "
            "`alembic revision --autogenerate` would drop them. Add it: target_metadata = "
            "[Base.metadata, sqla_queue.metadata]", force,
        )
    elif not host.passes_guard(options):
        click.echo(
            "note: pass process_revision_directives=sqla_queue.migrations.process_revision_directives to "
            "context.configure in env.py: it refuses an autogenerate revision that would drop or change "
            "the queue's tables", err=True,
        )


def _refuse_or_warn(message: str, force: bool) -> None:
    if not force:
        raise MigrationError(f"{message}; nothing was written (--force writes it anyway)")
    click.echo(f"warning: {message}; writing the revision anyway (--force)", err=True)


def _library_head() -> str:
    return migrations.script_directory().get_current_head()


def _refuse_branch(scripts, command: str) -> None:
    if host.uses_branch(scripts):
        raise MigrationError(
            f"your history already includes the queue's own branch ({migrations.VERSION_RESOURCE} "
            f"is in version_locations): `alembic upgrade heads` keeps it current, so there is "
            f"nothing to {command}; the two ways do not mix"
        )


def _refuse_unknown(done: str) -> None:
    known = {script.revision for script in migrations.script_directory().walk_revisions()}
    if done not in known:
        raise MigrationError(
            f"your history brings the queue's schema up to {done}, which this sqla_queue "
            f"does not know (its newest is {_library_head()}): upgrade sqla_queue"
        )


def _refuse_stamped_database(obj: CliContext) -> None:
    """A database whose queue schema came from ``sqla-queue db upgrade`` is already stamped
    with the queue's own revisions: a second copy would fail at ``alembic upgrade head``.
    Checked only when a database URL is given (``--database-url`` or the environment)."""
    if not obj.database_url:
        return
    engine = make_engine(obj.database_url)
    try:
        with engine.connect() as conn:
            stamped = migrations.current(conn)
            has_table = conn.execute(relation_exists(), {"name": "sqla_queue_jobs"}).scalar()
    except OperationalError:
        click.echo("note: the database could not be reached; it was not checked", err=True)
        return
    finally:
        engine.dispose()
    if stamped is not None:
        raise MigrationError(
            f"the database already has the queue's schema from `sqla-queue db upgrade` ({stamped}): "
            f"keep that way, or bring the queue's branch into your history "
            f"({migrations.VERSION_RESOURCE} in version_locations, then `alembic upgrade heads`)"
        )
    if has_table:
        raise MigrationError("the database already has a sqla_queue_jobs table that no revision recorded")


@contextmanager
def _host_errors() -> Iterator[None]:
    """Errors about the host's project become one line and exit code 2."""
    try:
        yield
    except CommandError as exc:  # host.HostError and Alembic's own (a bad script_location...)
        raise MigrationError(str(exc)) from None


def _report(script, target: str) -> None:
    parent = script.down_revision or "the base of your history"
    click.echo(
        f"revision {script.revision} brings the sqla_queue schema to {target}, on {parent}: "
        "review it, commit it, then run `alembic upgrade head`"
    )
