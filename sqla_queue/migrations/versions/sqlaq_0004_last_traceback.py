"""Add last_traceback: where the latest failed attempt raised, bounded and sanitized.

Revision ID: sqlaq_0004
Revises: sqlaq_0003
Create Date: 2026-12-09

Frozen: never edit this file once released; change the schema in a new revision.

Safe on a live queue: a nullable column without a default is a catalog-only change (a brief
ACCESS EXCLUSIVE lock, no table rewrite, no index). Workers of the previous version keep
working beside it: they never name the column, so their outcomes leave it NULL. The whole
revision is one transaction, and adding the column only if it is missing lets it be re-run.
"""

import sqlalchemy as sa

from alembic import op

revision = "sqlaq_0004"
down_revision = "sqlaq_0003"
branch_labels = None
depends_on = None

TABLE = "sqla_queue_jobs"


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("last_traceback", sa.Text(), nullable=True), if_not_exists=True)


def downgrade() -> None:
    op.drop_column(TABLE, "last_traceback")
