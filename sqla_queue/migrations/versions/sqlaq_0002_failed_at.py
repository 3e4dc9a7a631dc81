"""Add failed_at and the retention / recent-window indexes on finished jobs.

Revision ID: sqlaq_0002
Revises: sqlaq_0001
Create Date: 2026-12-02

Frozen: never edit this file once released; change the schema in a new revision.

Safe on a live queue: the nullable column without a default is a catalog-only change (a brief
ACCESS EXCLUSIVE lock, no table rewrite), and both indexes are built CONCURRENTLY, which cannot
run in a transaction, hence the autocommit block. That block commits whatever ran before it, so
the column can exist before the revision is stamped; if an index build is interrupted it leaves
an INVALID index behind. Both steps are therefore written to be re-run: the column is added only
if missing and each index is dropped (if present) before it is built.
"""

import sqlalchemy as sa

from alembic import op

revision = "sqlaq_0002"
down_revision = "sqlaq_0001"
branch_labels = None
depends_on = None

TABLE = "sqla_queue_jobs"
# (index name, column, the status whose rows it covers)
INDEXES = (
    ("sqla_queue_jobs_completed_at_idx", "completed_at", "completed"),
    ("sqla_queue_jobs_failed_at_idx", "failed_at", "failed"),
)


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("failed_at", sa.DateTime(timezone=True), nullable=True), if_not_exists=True)
    with op.get_context().autocommit_block():
        for name, column, status in INDEXES:
            op.drop_index(name, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
            op.create_index(
                name,
                TABLE,
                [column],
                postgresql_where=sa.text(f"status = '{status}'"),
                postgresql_concurrently=True,
            )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        for name, _column, _status in INDEXES:
            op.drop_index(name, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
    op.drop_column(TABLE, "failed_at")
