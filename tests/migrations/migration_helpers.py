"""Helpers for migration tests: catalog snapshots, a user-like shell, host-app templates."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, text

from sqla_queue import migrations

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
HEAD_ID = migrations.script_directory().get_current_head()
PREVIOUS_ID = migrations.script_directory().get_revision(HEAD_ID).down_revision
"""The branch's newest revision and the one before it (tests that mean "the head" use these)."""


def upgrade(engine: Engine, revision: str = migrations.HEAD) -> None:
    with engine.connect() as conn:
        migrations.upgrade(conn, revision)


def downgrade(engine: Engine, revision: str = migrations.BASE) -> None:
    with engine.connect() as conn:
        migrations.downgrade(conn, revision)


# -- catalog snapshots ---------------------------------------------------------------------

_COLUMNS = text("""
    SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
           pg_get_expr(d.adbin, d.adrelid), a.attidentity
    FROM pg_attribute a
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attrelid = CAST(:table AS regclass) AND a.attnum > 0 AND NOT a.attisdropped
""")
_CONSTRAINTS = text("""
    SELECT conname, contype, pg_get_constraintdef(oid)
    FROM pg_constraint WHERE conrelid = CAST(:table AS regclass)
""")
_INDEXES = text("""
    SELECT c.relname, pg_get_indexdef(i.indexrelid), i.indisvalid
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE i.indrelid = CAST(:table AS regclass)
""")
_RELATIONS = text("""
    SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = current_schema() AND c.relname NOT IN ('alembic_version', 'alembic_version_pkc')
""")


@dataclass(frozen=True)
class Catalog:
    """What PostgreSQL itself says a table is: columns, constraints, indexes (and validity).

    Stricter than autogenerate, which compares neither CHECK constraints nor index predicates.
    """

    columns: dict = field(default_factory=dict)
    constraints: dict = field(default_factory=dict)
    indexes: dict = field(default_factory=dict)


def catalog(conn: Connection, table: str) -> Catalog:
    params = {"table": table}
    return Catalog(
        columns={row[0]: tuple(row[1:]) for row in conn.execute(_COLUMNS, params)},
        constraints={row[0]: tuple(row[1:]) for row in conn.execute(_CONSTRAINTS, params)},
        indexes={row[0]: tuple(row[1:]) for row in conn.execute(_INDEXES, params)},
    )


def table_catalog(engine: Engine, table: str = "sqla_queue_jobs") -> Catalog:
    with engine.connect() as conn:
        return catalog(conn, table)


_TABLES = text("""
    SELECT tablename FROM pg_tables
    WHERE schemaname = current_schema() AND tablename <> 'alembic_version'
""")


def schema_catalog(engine: Engine) -> dict[str, Catalog]:
    """`catalog` of every table in the schema (bar Alembic's), by table name."""
    with engine.connect() as conn:
        return {name: catalog(conn, name) for name in conn.execute(_TABLES).scalars()}


def relations(engine: Engine) -> set[str]:
    """Every table, index, sequence and view in the schema, bar Alembic's version table."""
    with engine.connect() as conn:
        return set(conn.execute(_RELATIONS).scalars())


def stamped(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        exists = conn.execute(text("SELECT to_regclass('alembic_version')")).scalar()
        return set(conn.execute(text("SELECT version_num FROM alembic_version")).scalars()) if exists else set()


# -- subprocesses --------------------------------------------------------------------------


@dataclass
class Shell:
    """Runs commands the way a user would: in `cwd`, with the URL in SQLA_QUEUE_DATABASE_URL
    and this virtualenv's scripts (alembic, sqla-queue) first on PATH."""

    cwd: Path
    url: str
    env: dict[str, str] = field(default_factory=dict)

    def run(self, command: str, *, check: bool = True) -> subprocess.CompletedProcess:
        env = {
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "SQLA_QUEUE_DATABASE_URL": self.url,
            "PYTHONDONTWRITEBYTECODE": "1",
            **self.env,
        }
        result = subprocess.run(
            command, shell=True, executable="/bin/bash", cwd=self.cwd, env=env,
            capture_output=True, text=True, timeout=120,
        )
        if check and result.returncode != 0:
            pytest.fail(f"`{command}` exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result


# -- throwaway host applications -----------------------------------------------------------


HOST_INI = """\
[alembic]
script_location = %(here)s/migrations
prepend_sys_path = .
path_separator = space
version_locations = {version_locations}
"""

# No transaction_per_migration, on purpose: Alembic's default runs every revision in one
# transaction, and the queue's autocommit blocks must cope with that too.
HOST_ENV = """\
import os

from alembic import context
from sqlalchemy import create_engine

import sqla_queue
import sqla_queue.migrations
from hostapp.models import Base

if os.environ.get("HOST_TARGET") == "own":
    target_metadata = Base.metadata
else:
    target_metadata = [Base.metadata, sqla_queue.metadata]
include_name = sqla_queue.migrations.include_name if os.environ.get("HOST_INCLUDE_NAME") else None
guard = sqla_queue.migrations.process_revision_directives if os.environ.get("HOST_GUARD") else None

engine = create_engine(os.environ["SQLA_QUEUE_DATABASE_URL"])
with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        include_name=include_name,
        process_revision_directives=guard,
        compare_type=True,
        compare_server_default=True,
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
"""

HOST_MODELS = """\
from sqlalchemy import MetaData, Numeric
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from sqla_queue import JobMixin


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    total: Mapped[float] = mapped_column(Numeric(10, 2))
"""

# A host Base with a naming convention of its own (not the queue's), swapped in for "pass".
HOST_NAMED_BASE = """\
    metadata = MetaData(naming_convention={
        "ix": "ix_%(column_0_label)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "pk": "pk_%(table_name)s",
    })
"""

HOST_JOB_MODEL = """

class MyJob(JobMixin, Base):
    __tablename__ = "host_jobs"
"""

HOST_ORDERS_REVISION = '''\
"""The host's own history: an orders table."""

import sqlalchemy as sa
from alembic import op

revision = "host_0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "orders",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("total", sa.Numeric(10, 2), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade():
    op.drop_table("orders")
'''


@dataclass
class HostApp:
    root: Path
    shell: Shell

    def write(self, relative: str, content: str) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(content))
        return path


def job_round_trip(queue) -> None:
    """Enqueue, claim and complete one job, and fail another: the table works end to end."""

    @queue.task
    def send_receipt(payload, ctx):  # pragma: no cover - never run, only registered
        return None

    done, doomed = queue.enqueue(send_receipt, {"order": 1}), queue.enqueue(send_receipt, {"order": 2})
    claimed = {job.id: job for job in queue.claim(worker_id="host", limit=2)}
    assert set(claimed) == {done, doomed}
    assert queue.complete(done, claimed[done].claim_token)
    assert queue.fail(doomed, claimed[doomed].claim_token, error="card declined")
    assert queue.get_job(done).status == "completed"
    assert queue.get_job(doomed).failed_at is not None
