"""The ``sqla-queue`` root group: its global options, the context every command receives, and
`run`, which turns errors into one-line messages and exit codes.

Exit codes scripts can rely on: 0 success, 1 the command ran and found a problem (for example
a lost claim or a failed check), 2 bad usage or configuration (unknown app, task, bad URL).
Command modules import `main` from here and add themselves to it; this module imports each one
only when its command runs (`COMMAND_MODULES`), so the package has no import cycle and a worker
imports only what it uses.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field

import click

from .. import _startup
from .._sanitize import error_text
from ..db.engine import DATABASE_URL_ENV, is_url_of, make_engine
from ..errors import DatabaseError, PermissionDeniedError, SqlaQueueError
from ..plugins.entry_points import ENABLED_PLUGINS_ENV, installed_names, split_names, unknown_names_error
from ..queue import Queue

EXIT_PROBLEM = 1
EXIT_USAGE = 2

ROLES_PAGE = "docs/how-to/database-roles.md"


APP_ENV = "SQLA_QUEUE_APP"

# Commands that run or enqueue the app's tasks: a Queue built from a URL alone knows none.
NEEDS_TASKS = frozenset({"worker", "enqueue"})


@dataclass
class CliContext:
    app: str | None
    database_url: str | None
    _queue: Queue | None = field(default=None, repr=False)

    def queue(self) -> Queue:
        """The app's Queue (``--app module.path:attribute``), imported on first use; without
        --app, a Queue on the default table (`sqla_queue.Job`) at --database-url, so operators
        can inspect and repair the queue from a host without the application's code."""
        if self._queue is None:
            if self.app:
                queue = load_app(self.app)
                # Another URL on the command line (or in the env var) overrides the app's engine;
                # the app's own URL keeps its engine, connect_args and hooks included.
                if self.database_url and not is_url_of(self.database_url, queue.engine):
                    queue = queue.on_engine(make_engine(self.database_url))
                elif queue.core.executor.sync_refused:  # built from an AsyncEngine: its URL, synchronously
                    queue = queue.on_engine(queue.engine)
            else:
                queue = self._queue_from_url()
            self._queue = queue
        return self._queue

    def _queue_from_url(self) -> Queue:
        command = _command_name()
        if command in NEEDS_TASKS:
            raise click.UsageError(
                f"`{command}` runs your application's tasks: it needs --app module.path:queue_object "
                f"(or ${APP_ENV})"
            )
        if not self.database_url:
            raise click.UsageError(
                "this command needs --app module.path:queue_object, or a database URL for the default "
                f"job table: --database-url or ${DATABASE_URL_ENV}"
            )
        # Built like any Queue(url): the entry-point plugin rules apply as they would in the app.
        return Queue(self.database_url)

    def url(self) -> str:
        if self.database_url:
            return self.database_url
        if self.app:
            return self.queue().engine.url.render_as_string(hide_password=False)
        raise click.UsageError(f"no database: pass --database-url or set {DATABASE_URL_ENV}")


def _command_name() -> str | None:
    """The subcommand being run (``jobs list`` gives ``list``), to refuse task commands early."""
    ctx = click.get_current_context(silent=True)
    return ctx.info_name if ctx is not None else None


def load_app(spec: str) -> Queue:
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise click.BadParameter(f"{spec!r} is not of the form module.path:queue_object", param_hint="--app")
    if "" not in sys.path:
        sys.path.insert(0, "")  # like `python -m`: the current directory is importable
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise click.BadParameter(f"cannot import module {module_name!r}: {exc}", param_hint="--app") from None
    except Exception as exc:  # the app's own import failed: say so in one line, no traceback
        raise click.BadParameter(
            f"importing {module_name!r} failed: {error_text(exc)}", param_hint="--app"
        ) from None
    try:
        target = getattr(module, attribute)
    except AttributeError:
        raise click.BadParameter(f"module {module_name!r} has no attribute {attribute!r}", param_hint="--app") from None
    if not isinstance(target, Queue):
        raise click.BadParameter(
            f"{spec} is a {type(target).__name__}, not a sqla_queue.Queue", param_hint="--app"
        )
    return target


def _enable_plugins(ctx: click.Context, param: click.Parameter, names: tuple[str, ...]) -> None:
    """``--plugin NAME``: added to ``SQLA_QUEUE_PLUGINS`` for this command, so every Queue it
    builds (the ``--app`` one, imported later, or one built from the URL) enables it."""
    if not names:
        return
    available = installed_names()
    unknown = [name for name in names if name not in available]
    if unknown:
        raise click.BadParameter(str(unknown_names_error("--plugin", unknown, available)), param=param)
    previous = os.environ.get(ENABLED_PLUGINS_ENV)
    os.environ[ENABLED_PLUGINS_ENV] = ",".join(dict.fromkeys([*split_names(previous or ""), *names]))
    ctx.call_on_close(lambda: _restore_env(ENABLED_PLUGINS_ENV, previous))


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


# Each command's module, imported when that command runs (or a help text lists it): a worker
# never loads Alembic, Rich's tables or the doctor's checks, which it does not use.
COMMAND_MODULES = {
    "alembic": "alembic_cmd", "dashboard": "dashboard", "db": "db", "doctor": "doctor", "enqueue": "enqueue",
    "jobs": "jobs", "plugins": "plugins", "prune": "prune", "queues": "queues", "recover": "recover",
    "schedules": "schedules", "stats": "stats", "worker": "worker", "workers": "workers",
}


class CommandsOnDemand(click.Group):
    """A group whose commands live in `COMMAND_MODULES` and add themselves to it on import."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMAND_MODULES) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(f"{__package__}.{module}")
        _startup.resume()  # the command's own imports are done too (`sqla_queue._startup`)
        return self.commands.get(cmd_name)


@click.group(cls=CommandsOnDemand, context_settings={"help_option_names": ["-h", "--help"]})
# The version is read from the installed distribution's metadata only when --version is given.
@click.version_option(None, "--version", package_name="sqla-queue", message="sqla-queue %(version)s")
@click.option("--app", envvar=APP_ENV, metavar="MODULE:OBJECT",
              help=f"Where your Queue lives, e.g. myapp.jobs:queue (default: ${APP_ENV}). Needed by "
                   "worker and enqueue, and for custom job models; other commands can use "
                   "--database-url alone.")
@click.option(
    "--database-url",
    envvar=DATABASE_URL_ENV,
    metavar="URL",
    help=f"PostgreSQL URL (default: ${DATABASE_URL_ENV}).",
)
@click.option(
    "--plugin", "plugin_names", multiple=True, metavar="NAME", callback=_enable_plugins, expose_value=False,
    help=f"Enable an installed plugin by its entry-point name (repeatable); sets ${ENABLED_PLUGINS_ENV}.",
)
@click.pass_context
def main(ctx: click.Context, app: str | None, database_url: str | None) -> None:
    """sqla-queue: run workers, enqueue jobs and inspect the queue."""
    ctx.obj = CliContext(app=app, database_url=database_url)


def run() -> None:
    """Entry point: errors become one-line messages, not tracebacks (exit codes above)."""
    try:
        main.main(standalone_mode=False)
    except (click.exceptions.Abort, click.ClickException, SqlaQueueError, click.exceptions.Exit) as exc:
        sys.exit(report_error(exc))


def report_error(exc: BaseException) -> int:
    """Say what went wrong in one line (on stderr) and return the exit code it means; an
    exception that is not one of the command's own is raised again. Also what a worker process
    started by ``worker --processes`` ends with."""
    if isinstance(exc, click.exceptions.Abort):
        click.echo("Aborted.", err=True)
        return EXIT_PROBLEM
    if isinstance(exc, click.ClickException):
        exc.show()
        return exc.exit_code
    if isinstance(exc, PermissionDeniedError):
        click.echo(f"Error: database: {exc} (SQLSTATE 42501: the database role lacks a privilege this "
                   f"command needs; {ROLES_PAGE} lists the grants of a producer, a worker, an operator "
                   "and an observer)", err=True)
        return EXIT_PROBLEM
    if isinstance(exc, DatabaseError):
        click.echo(f"Error: database: {exc}", err=True)
        return EXIT_PROBLEM
    if isinstance(exc, SqlaQueueError):
        click.echo(f"Error: {exc}", err=True)
        return EXIT_USAGE
    if isinstance(exc, click.exceptions.Exit):
        return exc.exit_code
    raise exc
