"""The hot statements' compiled form kept on disk, so a fresh process skips building and
compiling them.

A worker's first round builds the complete-and-claim statement with SQLAlchemy Core and
compiles it (8 KiB of SQL), and a script's first enqueue compiles the INSERT and the wake-up:
some 20 ms of a worker's start-up and 5 ms of a one-job script's call, the same work in every
process. `driver.DriverStatement` keeps what it derives from a compile (the SQL text, which
values are written into it as literals, the constants sent beside it, the row's columns);
this module stores that as JSON, one file per statement, under a key naming everything the
text depends on:

- this package's statement code: the size and modification time of every module at its top
  level and under ``sql/`` and ``db/`` (where the builders live), as Python's own bytecode
  cache checks a source file, so an edited or upgraded package never reads an older entry;
- SQLAlchemy's version, the dialect (name, driver, parameter style, the server's version and
  the settings its first connection read) and the job table (name, schema, every column's
  key, name and type);
- the statement's name, its sample parameters and the claim order.

Only what can be named that way is stored: a table with a column type from outside SQLAlchemy
(an application's ``TypeDecorator`` may render differently after an edit that leaves its name
alone), a claim order of the application's own, or a statement whose constants do not survive
JSON unchanged is compiled in every process, as before. A missing, unreadable or malformed
file is compiled and written again; a directory that cannot be written is not an error.

Where: ``$SQLA_QUEUE_STATEMENT_CACHE`` (a directory; ``off`` turns the cache off), else
``$XDG_CACHE_HOME/sqla_queue/statements``, else ``~/.cache/sqla_queue/statements``; created
with mode 0700, and read only while it and the entry are this user's and no one else can write
them (docs/how-to/run-workers.md, "The statement cache").
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import weakref
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import Table
from sqlalchemy import __version__ as sqlalchemy_version
from sqlalchemy.engine import Dialect

logger = logging.getLogger("sqla_queue")

CACHE_ENV = "SQLA_QUEUE_STATEMENT_CACHE"
OFF = "off"
FORMAT = 1
"""Bumped when what an entry holds changes shape."""
MAX_ENTRIES = 1000
"""Entries kept: past this, a write removes the older half (each package edit starts new ones)."""

_PACKAGE = Path(__file__).resolve().parent.parent
_STATEMENT_CODE = ("sql", "db")
"""The subpackages, besides the package's top-level modules, whose code builds statements."""


class StatementCache:
    """JSON entries in `directory`, keyed by `key`'s description of a statement."""

    def __init__(self, directory: Path, *, named: bool = False) -> None:
        self.directory = directory
        self.named = named
        """Named by ``$SQLA_QUEUE_STATEMENT_CACHE``: a directory it cannot write is worth a warning."""
        self._checked: bool | None = None

    @classmethod
    def configured(cls) -> StatementCache | None:
        """The cache ``$SQLA_QUEUE_STATEMENT_CACHE`` names (None for ``off``), else the
        user's cache directory's."""
        given = os.environ.get(CACHE_ENV, "").strip()
        if given.lower() == OFF:
            return None
        if given:
            return cls(Path(given).expanduser(), named=True)
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return cls(Path(base) / "sqla_queue" / "statements")

    def key(self, name: str, table: Table, dialect: Dialect, order: Any, sample: dict[str, Any],
            binary: tuple[str, ...]) -> str | None:
        """The entry's file stem for statement `name`, or None when what it depends on cannot
        be named (see the module's docstring)."""
        columns = _columns(table)
        if columns is None or type(order).__module__.split(".")[0] != "sqla_queue":
            return None
        described = json.dumps([
            FORMAT, package_fingerprint(), sqlalchemy_version, _dialect_facts(dialect),
            table.schema, table.name, columns, repr(order), name, sorted(sample), list(binary),
        ], default=repr)
        return hashlib.sha256(described.encode()).hexdigest()

    def load(self, key: str) -> dict[str, Any] | None:
        """The entry stored under `key`, or None (absent, unreadable, not ours). Only from a
        directory and a file this user owns and no one else can write: an entry is SQL the
        process will run."""
        path = self.directory / f"{key}.json"
        try:
            with open(path, encoding="utf-8") as file:
                if not (self._private() and _private(os.fstat(file.fileno()))):
                    return None
                entry = json.load(file)
        except (OSError, ValueError):
            return None
        return entry if isinstance(entry, dict) and entry.get("format") == FORMAT else None

    def _private(self) -> bool:
        """The directory is this user's and only theirs to write (checked once per cache)."""
        if self._checked is None:
            try:
                self._checked = _private(os.stat(self.directory))
            except OSError:
                return False
            if not self._checked:
                _not_private(self)
        return self._checked

    def store(self, key: str, entry: dict[str, Any]) -> None:
        """Write `entry` under `key`, whole or not at all (a reader never sees half a file)."""
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=self.directory, prefix=".", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as file:
                    json.dump({**entry, "format": FORMAT}, file)
                os.replace(temporary, self.directory / f"{key}.json")
            except BaseException:
                os.unlink(temporary)
                raise
            self._trim()
        except OSError as exc:  # a read-only home, a full disk: the statement is compiled each time
            _not_written(self, exc)

    def _trim(self) -> None:
        entries = sorted(self.directory.glob("*.json"), key=_modified)
        if len(entries) > MAX_ENTRIES:
            for path in entries[:len(entries) // 2]:
                path.unlink(missing_ok=True)


_WARNED: set[Path] = set()


def _not_written(cache: StatementCache, error: OSError) -> None:
    """Say once per directory that it cannot be written: as a warning for the directory
    ``$SQLA_QUEUE_STATEMENT_CACHE`` names, else (a read-only home, say) only when debugging."""
    if cache.named and cache.directory not in _WARNED:
        _WARNED.add(cache.directory)
        logger.warning("%s=%s cannot be written (%s): each process compiles its statements",
                       CACHE_ENV, cache.directory, error.strerror or type(error).__name__)
    else:
        logger.debug("statement cache %s not written: %s", cache.directory, error)


def _private(stat: os.stat_result) -> bool:
    """Owned by this process's user and writable by no group or other user (where the system
    has users: elsewhere the directory's own permissions are all there is)."""
    if not hasattr(os, "getuid"):
        return True
    return stat.st_uid == os.getuid() and not stat.st_mode & 0o022


def _not_private(cache: StatementCache) -> None:
    logger.warning("statement cache %s is not private to this user (another user owns it or can write to it): "
                   "its entries are not read, and each process compiles its statements", cache.directory)


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


@cache
def package_fingerprint(package: Path = _PACKAGE) -> str:
    """Size and modification time of every module that builds statements: top-level modules
    and those under ``sql/`` and ``db/``. Read with `os.scandir` (a third of pathlib's globbing:
    this runs in every worker's start-up)."""
    digest = hashlib.sha256()
    for relative, stat in _statement_modules(str(package)):
        digest.update(f"{relative}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _statement_modules(package: str) -> list[tuple[str, os.stat_result]]:
    """(path relative to `package`, its stat) of each module, sorted by path."""
    found = []
    pending = [("", package, False)]
    while pending:
        relative, directory, recurse = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.endswith(".py") and entry.is_file():
                    found.append((relative + entry.name, entry.stat()))
                elif entry.is_dir() and (recurse or (not relative and entry.name in _STATEMENT_CODE)) \
                        and entry.name != "__pycache__":
                    pending.append((f"{relative}{entry.name}/", entry.path, True))
    return sorted(found, key=lambda item: item[0])


_COLUMNS: weakref.WeakKeyDictionary[Table, list[tuple[str, str, str]] | None] = weakref.WeakKeyDictionary()


def _columns(table: Table) -> list[tuple[str, str, str]] | None:
    """Each column's key, name and type, or None if a type is not SQLAlchemy's own (once per
    table: a table's columns do not change once its statements are built)."""
    try:
        return _COLUMNS[table]
    except KeyError:
        columns = _COLUMNS[table] = _described_columns(table)
        return columns


def _described_columns(table: Table) -> list[tuple[str, str, str]] | None:
    columns = []
    for column in table.columns:
        kind = type(column.type)
        if kind.__module__.split(".")[0] != "sqlalchemy":
            return None
        columns.append((column.key, column.name, repr(column.type)))
    return columns


def _dialect_facts(dialect: Dialect) -> list[Any]:
    """What a compiled text may depend on besides the statement: which dialect, and what its
    first connection learned (the server's version, how it quotes strings, name lengths)."""
    kind = type(dialect)
    return [f"{kind.__module__}.{kind.__qualname__}", dialect.paramstyle, dialect.server_version_info,
            getattr(dialect, "_backslash_escapes", None), dialect.max_identifier_length, dialect.label_length,
            getattr(dialect, "use_native_hstore", None)]
