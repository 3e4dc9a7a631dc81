"""The ``sqla-queue`` console script (click). The only part of the package that prints.

`root` holds the group, its options and `run`; each command lives in a module named for it
(``sqla-queue jobs`` in `jobs`, ``sqla-queue stats`` in `stats`, ...) and adds itself to the
group when imported, which `root.CommandsOnDemand` does when that command runs.
"""

from __future__ import annotations

from .root import EXIT_PROBLEM, EXIT_USAGE, CliContext, load_app, main, run

__all__ = ["EXIT_PROBLEM", "EXIT_USAGE", "CliContext", "load_app", "main", "run"]
