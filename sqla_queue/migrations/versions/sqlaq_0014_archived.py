"""History partitions: sqla_queue_jobs.archived.

Revision ID: sqlaq_0014
Revises: sqlaq_0013
Create Date: 2026-12-05

Frozen: never edit this file once released; change the schema in a new revision.

Safe on a live queue: a NOT NULL boolean column with a constant default is a catalog-only change
(a brief ACCESS EXCLUSIVE lock, no rewrite), false on every row. It is the partition key of the
partitioned layout (`sqla_queue.ops.storage.partition_history`, docs/explanation/storage.md),
which converts the table online when an operator asks for it; until then the column stays false.
Downgrade drops the column; PostgreSQL refuses while the table is partitioned by it.
"""

import sqlalchemy as sa

from alembic import op

revision = "sqlaq_0014"
down_revision = "sqlaq_0013"
branch_labels = None
depends_on = None

TABLE = "sqla_queue_jobs"


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("archived", sa.Boolean(), server_default=sa.false(), nullable=False),
                  if_not_exists=True)


def downgrade() -> None:
    op.drop_column(TABLE, "archived", if_exists=True)
