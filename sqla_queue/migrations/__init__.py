"""The queue's Alembic revisions, shipped inside the package as the ``sqla_queue`` branch.

A host with its own Alembic environment either copies the schema into its own history
(``sqla-queue alembic install``, `sqla_queue.migrations.host`) or adds `VERSION_RESOURCE` (or
the path `VERSION_LOCATION`) to its ``version_locations`` and runs ``alembic upgrade heads``
(`process_revision_directives` keeps its own revisions out of this package). Without one,
`upgrade` (and ``sqla-queue db upgrade``) runs the bundled environment against a connection. Either way the
revision is stamped into the database's ``alembic_version`` table, so an application can start
with ``sqla-queue db`` and move to its own Alembic later without re-stamping anything.

Revision files here import only alembic and sqlalchemy, never ``sqla_queue.models``: they are
frozen history. See docs/how-to/alembic-integration.md.
"""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util import CommandError
from sqlalchemy import Connection

from alembic import command

from .guard import (  # noqa: F401 (QUEUE_TABLES: re-exported)
    QUEUE_TABLES,
    drop_layout_differences,
    is_queue_table,
    job_table_partitioned,
    refuse_queue_table_changes,
)

BRANCH_LABEL = "sqla_queue"
SCRIPT_LOCATION = str(Path(__file__).resolve().parent)
VERSION_LOCATION = str(Path(__file__).resolve().parent / "versions")
VERSION_RESOURCE = "sqla_queue.migrations:versions"
"""`VERSION_LOCATION` in Alembic's ``package:directory`` form: the same in every virtualenv, so
a host can write it into ``alembic.ini`` (with ``path_separator = space``) or pyproject.toml."""
HEAD = f"{BRANCH_LABEL}@head"
BASE = f"{BRANCH_LABEL}@base"
PREVIOUS = f"{BRANCH_LABEL}@-1"

PARTITIONED_LABEL = "sqla_queue_partitioned"
"""The opt-in branch that converts the job table to the partitioned layout
(docs/explanation/storage.md). Its revisions live in a directory of their own, so a host's
``alembic upgrade heads`` applies them only once it lists `PARTITIONED_RESOURCE`."""
PARTITIONED_LOCATION = str(Path(__file__).resolve().parent / "partitioned")
PARTITIONED_RESOURCE = "sqla_queue.migrations:partitioned"
PARTITIONED_HEAD = f"{PARTITIONED_LABEL}@head"
PARTITIONED_BASE = f"{PARTITIONED_LABEL}@base"


def alembic_config(connection: Connection, lock_timeout: timedelta | None = None, *,
                   partitioned: bool = False) -> Config:
    """An Alembic Config for the bundled environment, running on `connection`. The opt-in
    `PARTITIONED_LABEL` branch is known only when `partitioned`, so that ``heads`` means the
    ``sqla_queue`` branch's head until a database has the layout. `lock_timeout` reaches the
    revisions that take one, as ``-x lock_timeout`` would."""
    x = [] if lock_timeout is None else [f"lock_timeout={int(lock_timeout.total_seconds() * 1000)}ms"]
    config = Config(cmd_opts=Namespace(x=x))
    config.set_main_option("script_location", SCRIPT_LOCATION)
    # Package resources, not paths: a path may hold the separator.
    config.set_main_option("path_separator", "space")
    config.set_main_option("version_locations", " ".join([VERSION_RESOURCE] + [PARTITIONED_RESOURCE] * partitioned))
    config.attributes["connection"] = connection
    return config


def script_directory() -> ScriptDirectory:
    """The queue's ``sqla_queue`` branch alone (no host history): for inspecting the branch."""
    return ScriptDirectory(SCRIPT_LOCATION, version_locations=[VERSION_LOCATION])


def all_scripts() -> ScriptDirectory:
    """Both of the queue's branches, ``sqla_queue`` and the opt-in `PARTITIONED_LABEL`."""
    return ScriptDirectory(SCRIPT_LOCATION, version_locations=[VERSION_LOCATION, PARTITIONED_LOCATION])


def upgrade(connection: Connection, revision: str = HEAD, *, lock_timeout: timedelta | None = None) -> None:
    """Apply the queue's revisions up to `revision` (default: the branch head;
    `PARTITIONED_HEAD` converts the job table to the partitioned layout, giving up a step
    that waits longer than `lock_timeout` for its lock).

    Each revision commits on its own, because ``CREATE INDEX CONCURRENTLY`` cannot run inside
    a transaction; see `_outside_transaction` for a `connection` that is already in one.
    """
    with _outside_transaction(connection) as conn:
        command.upgrade(alembic_config(conn, lock_timeout, partitioned=_partitioned(conn, revision)), revision)


def downgrade(connection: Connection, revision: str = BASE, *, lock_timeout: timedelta | None = None) -> None:
    """Undo the queue's revisions down to `revision` (default: drop the queue's schema)."""
    with _outside_transaction(connection) as conn:
        command.downgrade(alembic_config(conn, lock_timeout, partitioned=_partitioned(conn, revision)), revision)


def current(connection: Connection) -> str | None:
    """The queue's ``sqla_queue`` revision stamped in ``alembic_version``, or None if none is.

    Rows of the host's own branches are ignored. Alembic keeps only heads in that table, so a
    revision that ``depends_on`` ours replaces our row: a revision of the opt-in
    `PARTITIONED_LABEL` branch stands for the ``sqla_queue`` revision below it; a host's own,
    when `foreign_revisions` is not empty, leaves None, which then means "unknown here" (ask
    the host's ``alembic current``), not "not installed".
    """
    stamped = tuple(rev for rev in _stamped(connection) if rev in _our_revisions())
    if not stamped:
        return None
    main = _main_revisions()
    return next(script.revision for script in all_scripts().iterate_revisions(stamped, "base")
                if script.revision in main)


def partitioned_revision(connection: Connection) -> str | None:
    """The opt-in `PARTITIONED_LABEL` branch's revision stamped in ``alembic_version``, or None."""
    branch = {script.revision for script in all_scripts().walk_revisions()} - _main_revisions()
    return next((rev for rev in _stamped(connection) if rev in branch), None)


def foreign_revisions(connection: Connection) -> list[str]:
    """Revisions in ``alembic_version`` that are not the queue's: the database has an Alembic
    history of its own, which the bundled environment (`upgrade`, ``sqla-queue db``) cannot
    read. Such a host upgrades the queue with its own ``alembic upgrade heads``."""
    ours = _our_revisions()
    return [rev for rev in _stamped(connection) if rev not in ours]


def include_name(name: str | None, type_: str, parent_names: Mapping[str, Any]) -> bool:
    """Alembic ``include_name`` hook that leaves the queue's tables out of autogenerate.

    Only for a host that runs the queue's branch but keeps ``sqla_queue.metadata`` out of its
    ``target_metadata``: without this, ``alembic check`` reports the queue's table as one to
    drop. It leaves out the job table's partitions too (`guard.PARTITION_PREFIXES`). Hosts that list the metadata (the recommended way) need no hook: it compares clean.
    """
    return not (type_ == "table" and is_queue_table(name))


def process_revision_directives(context: Any, revision: Any, directives: list[Any]) -> None:
    """Alembic hook for a host's env.py, the queue's guard: refuses an autogenerated revision
    that would drop or change a queue table (a ``target_metadata`` without
    ``sqla_queue.metadata``, a database behind the queue's schema), and, for a host that lists
    the queue's branch, one written inside this package (where ``alembic revision`` puts it
    while the queue's branch is the only head: it would vanish at the next install). Pass it to
    ``context.configure(process_revision_directives=...)``; it writes nothing, so the revision
    is not written either."""
    scripts = context.script
    partitioned = job_table_partitioned(context)
    for directive in directives:
        pairs = zip(directive.upgrade_ops_list, directive.downgrade_ops_list, strict=True)
        for upgrade_ops, downgrade_ops in pairs:
            if partitioned:
                drop_layout_differences(upgrade_ops)
                downgrade_ops.ops = upgrade_ops.reverse().ops
            refuse_queue_table_changes(upgrade_ops)
        target = directive.version_path or _default_version_path(scripts, directive.head)
        if target is not None and Path(target).resolve() == Path(VERSION_LOCATION):
            raise CommandError(
                "this revision would be written inside the installed sqla_queue package "
                f"({VERSION_LOCATION}), on the queue's branch. Start your own branch: "
                "alembic revision --autogenerate -m MESSAGE --head=base --branch-label LABEL "
                "--version-path YOUR_VERSIONS_DIR, then later ones with --head=LABEL@head"
            )


def _default_version_path(scripts: ScriptDirectory, head: str | None) -> str | None:
    """Where `ScriptDirectory.generate_revision` puts a revision on `head` when no
    ``--version-path`` is given: the directory of the head's own file."""
    try:
        heads = scripts.revision_map.get_revisions(head or "head")
    except RevisionError:  # several heads, an unknown name: Alembic itself reports it next
        return None
    for script in heads:
        if script is not None:
            return str(Path(script.path).parent)
    return None


def _partitioned(connection: Connection, revision: str) -> bool:
    """Whether a command to `revision` needs the opt-in branch: it names it, or the database
    has it (Alembic must find every revision stamped there)."""
    return PARTITIONED_LABEL in revision or "sqlaq_part_" in revision or partitioned_revision(connection) is not None


def _our_revisions() -> set[str]:
    return {script.revision for script in all_scripts().walk_revisions()}


def _main_revisions() -> set[str]:
    return {script.revision for script in script_directory().walk_revisions()}


def _stamped(connection: Connection) -> tuple[str, ...]:
    """Every row of ``alembic_version``. A transaction this read had to begin is rolled back,
    so `upgrade` can follow on the same connection."""
    began = not connection.in_transaction()
    try:
        return MigrationContext.configure(connection).get_current_heads()
    finally:
        if began:
            connection.rollback()


@contextmanager
def _outside_transaction(connection: Connection) -> Iterator[Connection]:
    """`connection`, or a second one from its engine if it sits in a transaction.

    A transaction that has not reached the server yet (``with engine.begin() as conn:`` before
    any statement) cannot be committed from inside its context manager, so the revisions run
    beside it. One that has reached the server may hold locks or a snapshot that our DDL and
    ``CONCURRENTLY`` would wait on forever: that is refused.
    """
    if not connection.in_transaction():
        yield connection
        return
    if _server_transaction_open(connection):
        raise CommandError(
            "migrations cannot run inside an open transaction (CREATE INDEX CONCURRENTLY): "
            "commit first, or pass a connection from engine.connect()"
        )
    with connection.engine.connect() as own:
        yield own


def _server_transaction_open(connection: Connection) -> bool:
    """True once the driver has sent BEGIN (psycopg 3 ``info.transaction_status``, psycopg2
    ``get_transaction_status()``; 0 is idle in both). Unknown drivers count as open."""
    dbapi = connection.connection.dbapi_connection
    info = getattr(dbapi, "info", None)
    if info is not None and hasattr(info, "transaction_status"):
        return int(info.transaction_status) != 0
    if hasattr(dbapi, "get_transaction_status"):
        return int(dbapi.get_transaction_status()) != 0
    return True
