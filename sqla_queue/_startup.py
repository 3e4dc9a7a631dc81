"""The command line's start-up: Python's cyclic garbage collector paused while the ``sqla-queue``
process imports, then what it imported put out of the collector's sight.

Importing SQLAlchemy, psycopg and sqla_queue makes some 65,000 objects that live as long as the
process, and the collector walks them again and again while they arrive: on a 2-core machine
the imports end some 40 ms sooner without it (docs/how-to/run-workers.md, "Use every core"). The console
script (and ``python -m sqla_queue.cli``) pauses it from the first line of ``sqla_queue``
(`pause_for_the_command_line`) until the command's own module is imported
(`cli.root.CommandsOnDemand`, then `resume`): ``worker`` brings psycopg and the worker's modules
with it. `resume` freezes what is there (`gc.freeze`: the import's leftovers, a few hundred
objects, are never collected) and turns the collector back on, before the application's module
is imported: the application's own code runs with the collector as it always has. Any other process that imports sqla_queue (an application, a test run, a
shell) keeps its collector untouched: only the command's own entry points pause it.
"""

from __future__ import annotations

import gc
import os
import sys

COMMAND_NAMES = ("sqla-queue", "sqla-queue-script")
"""The console script's file name without its extension (``-script``: a Windows launcher's)."""
COMMAND_MODULE = "sqla_queue.cli"

_paused = False


def started_as_the_command_line(argv: list[str], orig_argv: list[str]) -> bool:
    """This process is ``sqla-queue`` (the console script) or ``python -m sqla_queue.cli``:
    `argv` is ``sys.argv`` while ``sqla_queue`` is imported, `orig_argv` the interpreter's own
    command line (``sys.orig_argv``)."""
    if not argv:
        return False
    name = argv[0].replace("\\", "/").rsplit("/", 1)[-1]  # a Windows path too
    if os.path.splitext(name)[0] in COMMAND_NAMES:
        return True
    # `python -m`: while the module is being found, ``sys.argv[0]`` is "-m".
    if argv[0] != "-m" or "-m" not in orig_argv:
        return False
    at = orig_argv.index("-m")
    return orig_argv[at + 1:at + 2] == [COMMAND_MODULE]


def pause_for_the_command_line() -> None:
    """Called first thing by ``sqla_queue``: pause the collector in the command's process."""
    global _paused
    if not _paused and gc.isenabled() and started_as_the_command_line(sys.argv, getattr(sys, "orig_argv", [])):
        gc.disable()
        _paused = True


def resume() -> None:
    """The imports are done: freeze what they made and turn the collector back on (no-op when
    it was not paused here)."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
