"""Add sqla_queue_jobs.lease_expires_at: the end of the holder's own lease, which recovery reads.

Revision ID: sqlaq_0008
Revises: sqlaq_0007
Create Date: 2026-12-04

Frozen: never edit this file once released; change the schema in a new revision.

Recovery used to judge a running job by the recovering process's lease (``locked_at`` older
than its ``--lease``), so a recoverer with a shorter lease than the job's holder took back live
jobs. The claim now stores when the claiming worker's lease ends, every renewal moves it, and
recovery compares it with the database clock. Running rows claimed before this revision keep
NULL and are judged as before (``locked_at`` and the recoverer's lease).

A nullable column without a default is a catalog-only change (a brief ACCESS EXCLUSIVE lock,
no rewrite). The partial index over running jobs is built CONCURRENTLY, so claims and outcomes
go on meanwhile; a leftover invalid index from an interrupted build is dropped first, so the
revision can run again. Downgrade drops the index and the column.
"""

import sqlalchemy as sa

from alembic import op

revision = "sqlaq_0008"
down_revision = "sqlaq_0007"
branch_labels = None
depends_on = None

TABLE = "sqla_queue_jobs"
EXPIRY_INDEX = "sqla_queue_jobs_running_expiry_idx"


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
                  if_not_exists=True)
    with op.get_context().autocommit_block():
        op.drop_index(EXPIRY_INDEX, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
        op.create_index(EXPIRY_INDEX, TABLE, ["lease_expires_at", "id"],
                        postgresql_where=sa.text("status = 'running'"), postgresql_concurrently=True)


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index(EXPIRY_INDEX, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
    op.drop_column(TABLE, "lease_expires_at", if_exists=True)
