"""Replace the index of running jobs by lease start with one of pre-sqlaq_0008 claims only.

Revision ID: sqlaq_0009
Revises: sqlaq_0008
Create Date: 2026-12-04

Frozen: never edit this file once released; change the schema in a new revision.

Since sqlaq_0008 every claim writes ``lease_expires_at`` and recovery reads it through
``running_expiry_idx``, yet every claim and renewal still added an entry to
``running_lease_idx`` (``locked_at, id`` of every running job) as well: one more index entry
per job, about 9 % of a no-op job's WAL. Only rows claimed before sqlaq_0008 (no lease end)
still need a range on ``locked_at``, so the index now covers those alone: ``running_unleased_idx``
on ``(locked_at, id) WHERE status = 'running' AND lease_expires_at IS NULL``, which new claims
never enter. Workers of any version keep working during a rolling upgrade: no statement names an
index, and a row an older worker claims without a lease end lands in the new index.

Both indexes are built and dropped CONCURRENTLY, so claims and outcomes go on; a leftover
invalid index from an interrupted build is dropped first, so the revision can run again.
Downgrade builds the old index again and drops the new one.
"""

import sqlalchemy as sa

from alembic import op

revision = "sqlaq_0009"
down_revision = "sqlaq_0008"
branch_labels = None
depends_on = None

TABLE = "sqla_queue_jobs"
LEASE_INDEX = "sqla_queue_jobs_running_lease_idx"
UNLEASED_INDEX = "sqla_queue_jobs_running_unleased_idx"


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index(UNLEASED_INDEX, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
        op.create_index(UNLEASED_INDEX, TABLE, ["locked_at", "id"],
                        postgresql_where=sa.text("status = 'running' AND lease_expires_at IS NULL"),
                        postgresql_concurrently=True)
        op.drop_index(LEASE_INDEX, table_name=TABLE, postgresql_concurrently=True, if_exists=True)


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index(LEASE_INDEX, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
        op.create_index(LEASE_INDEX, TABLE, ["locked_at", "id"],
                        postgresql_where=sa.text("status = 'running'"), postgresql_concurrently=True)
        op.drop_index(UNLEASED_INDEX, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
