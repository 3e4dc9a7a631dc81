"""Keyless jobs leave the active-key index; waiting jobs get an index of their own.

Revision ID: sqlaq_0015
Revises: sqlaq_0014
Create Date: 2026-12-06

Frozen: never edit this file once released; change the schema in a new revision.

The unique index that keeps one active job per idempotency key held an entry for every active
job, with a key or without (a btree indexes NULLs), so each enqueue, claim and lease renewal of
a keyless job wrote an index entry for nothing: a NULL never conflicts. Its predicate gains
``idempotency_key IS NOT NULL``. The active-jobs aggregate (``sqla-queue stats``, the minute
samples) read every active row through that index; it now reads them through the partial
indexes of their states, and waiting jobs, which no other index held, get
``sqla_queue_jobs_waiting_idx``.

Safe on a live queue: both are built CONCURRENTLY, the new active-key index under a temporary
name while the old one still enforces the keys, then in its place. Every step can be re-run
after an interruption. In the partitioned layout (``sqla_queue_partitioned``) the indexes live
on the live partition, ``sqla_queue_jobs_live``, and are built there: the revision asks the
database which layout it has. Written out as SQL (``--sql``) or copied into an application's
own history, it is the plain table's; a database in the partitioned layout runs those
statements against ``sqla_queue_jobs_live`` instead (docs/how-to/alembic-integration.md).
Downgrade rebuilds the earlier index the same way and drops the waiting index.
"""

import sqlalchemy as sa

from alembic import op

revision = "sqlaq_0015"
down_revision = "sqlaq_0014"
branch_labels = None
depends_on = None

TABLE = "sqla_queue_jobs"
LIVE = "sqla_queue_jobs_live"
KEY_INDEX = "sqla_queue_jobs_active_key_idx"
BUILDING = "sqla_queue_jobs_active_key_idx_building"
WAITING_INDEX = "sqla_queue_jobs_waiting_idx"
ACTIVE = "status IN ('waiting', 'pending', 'running')"
KEYED_ACTIVE = f"idempotency_key IS NOT NULL AND {ACTIVE}"


def upgrade() -> None:
    table = _rows_table()
    with op.get_context().autocommit_block():
        op.create_index(WAITING_INDEX, table, ["queue_name"], postgresql_where=sa.text("status = 'waiting'"),
                        postgresql_concurrently=True, if_not_exists=True)
    _rebuild_key_index(table, KEYED_ACTIVE)


def downgrade() -> None:
    table = _rows_table()
    _rebuild_key_index(table, ACTIVE)
    with op.get_context().autocommit_block():
        op.drop_index(WAITING_INDEX, table_name=table, postgresql_concurrently=True, if_exists=True)


def _rows_table() -> str:
    """The table that holds the job rows and their indexes: the live partition in the
    partitioned layout (an index cannot be built CONCURRENTLY on a partitioned table)."""
    if op.get_context().as_sql:
        return TABLE
    kind = op.get_bind().execute(sa.text("SELECT relkind FROM pg_class WHERE oid = to_regclass(:name)"),
                                 {"name": TABLE}).scalar()
    return LIVE if kind == "p" else TABLE


def _rebuild_key_index(table: str, predicate: str) -> None:
    """The active-key index with `predicate`, built beside the old one, then in its place."""
    with op.get_context().autocommit_block():
        op.drop_index(BUILDING, table_name=table, postgresql_concurrently=True, if_exists=True)
        op.create_index(BUILDING, table, ["idempotency_key"], unique=True, postgresql_where=sa.text(predicate),
                        postgresql_concurrently=True)
        op.drop_index(KEY_INDEX, table_name=table, postgresql_concurrently=True, if_exists=True)
        op.execute(f"ALTER INDEX {BUILDING} RENAME TO {KEY_INDEX}")
