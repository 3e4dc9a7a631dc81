"""The ``sqla-queue`` console script (click). The only part of the package that prints.

Exit codes scripts can rely on: 0 success, 1 the command ran and found a problem (for example
a lost claim or a failed check), 2 bad usage or configuration (unknown app, task, bad URL).
Each command module adds itself to `main`.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field

import click

from .._engine import DATABASE_URL_ENV, make_engine
from .._sanitize import error_text
from ..errors import DatabaseError, SqlaQueueError
from ..queue import Queue

EXIT_PROBLEM = 1
EXIT_USAGE = 2


@dataclass
class CliContext:
    app: str | None
    database_url: str | None
    _queue: Queue | None = field(default=None, repr=False)

    def queue(self) -> Queue:
        """The app's Queue (``--app module.path:attribute``), imported on first use."""
        if self._queue is None:
            if not self.app:
                raise click.UsageError("this command needs --app module.path:queue_object")
            queue = load_app(self.app)
            if self.database_url:  # the command line (or the env var) overrides the app's engine
                queue = queue._bound_to(make_engine(self.database_url), call_timeout=None)
            self._queue = queue
        return self._queue

    def url(self) -> str:
        if self.database_url:
            return self.database_url
        if self.app:
            return self.queue().engine.url.render_as_string(hide_password=False)
        raise click.UsageError(f"no database: pass --database-url or set {DATABASE_URL_ENV}")


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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--app", metavar="MODULE:OBJECT", help="Where your Queue lives, e.g. myapp.jobs:queue.")
@click.option(
    "--database-url",
    envvar=DATABASE_URL_ENV,
    metavar="URL",
    help=f"PostgreSQL URL (default: ${DATABASE_URL_ENV}).",
)
@click.pass_context
def main(ctx: click.Context, app: str | None, database_url: str | None) -> None:
    """sqla-queue: run workers, enqueue jobs and inspect the queue."""
    ctx.obj = CliContext(app=app, database_url=database_url)


def run() -> None:
    """Entry point: errors become one-line messages, not tracebacks (exit codes above)."""
    try:
        main.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(EXIT_PROBLEM)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except DatabaseError as exc:
        click.echo(f"Error: database: {exc}", err=True)
        sys.exit(EXIT_PROBLEM)
    except SqlaQueueError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


from . import jobs as _jobs  # noqa: E402,F401  (commands register themselves on `main`)
from . import db as _db  # noqa: E402,F401
from . import worker as _worker  # noqa: E402,F401
from . import plugins as _plugins  # noqa: E402,F401
from . import ops as _ops  # noqa: E402,F401
from . import alembic_cmd as _alembic_cmd  # noqa: E402,F401
