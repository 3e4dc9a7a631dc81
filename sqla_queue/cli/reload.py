"""``sqla-queue worker --reload``: for development, the worker runs as a child process that is
stopped (SIGINT: it finishes its running jobs within ``--grace``) and started again whenever a
Python file under the watched directories changes. watchfiles does the watching
(``pip install 'sqla-queue[reload]'``); the parent never imports the application, so a change
that breaks the import is fixed by the next save, not by restarting the command."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterable
from pathlib import Path

import click

RELOAD_OPTIONS = ("--reload",)
RELOAD_DIR_OPTION = "--reload-dir"


def child_argv(argv: Iterable[str]) -> list[str]:
    """The command line again without ``--reload`` and ``--reload-dir``: what the child runs."""
    kept: list[str] = []
    items = iter(argv)
    for item in items:
        if item in RELOAD_OPTIONS or item.startswith(f"{RELOAD_DIR_OPTION}="):
            continue
        if item == RELOAD_DIR_OPTION:
            next(items, None)
            continue
        kept.append(item)
    return [sys.executable, "-m", "sqla_queue.cli", *kept]


def run_reloading(dirs: tuple[str, ...], grace_seconds: float) -> None:
    """Run the worker command in a child until SIGTERM/SIGINT, restarting it on each change."""
    try:
        import watchfiles
    except ImportError:
        raise click.UsageError("--reload needs watchfiles: pip install 'sqla-queue[reload]'") from None
    watched = [str(Path(d).resolve()) for d in (dirs or (".",))]
    command = shlex.join(child_argv(sys.argv[1:]))
    click.echo(f"sqla-queue worker --reload: watching {', '.join(watched)} for Python changes", err=True)

    def changed(changes: set[tuple[object, str]]) -> None:
        paths = sorted({path for _, path in changes})
        click.echo(f"sqla-queue worker --reload: {paths[0]}{' and more' if len(paths) > 1 else ''} changed, "
                   "restarting the worker", err=True)

    try:
        watchfiles.run_process(*watched, target=command, target_type="command", callback=changed,
                               watch_filter=watchfiles.PythonFilter(),
                               sigint_timeout=int(grace_seconds) + 5)
    except KeyboardInterrupt:  # watchfiles turns SIGTERM into this, after stopping the worker
        pass
