"""Add sqla_queue_jobs.meta: what enqueue stores with a job for its handler (``ctx.meta``).

Revision ID: sqlaq_0007
Revises: sqlaq_0006
Create Date: 2026-12-04

Frozen: never edit this file once released; change the schema in a new revision.

A nullable JSONB column without a default: PostgreSQL adds it as a catalog change, without
rewriting the table or scanning it, so it is safe on a live, populated queue (the ACCESS
EXCLUSIVE lock it takes is held for milliseconds; set lock_timeout in the host's environment if
long transactions may hold the table). Like the revisions before it, it can run again over a
partly applied schema (IF NOT EXISTS). Downgrade drops the column and what it held.
"""

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision = "sqlaq_0007"
down_revision = "sqlaq_0006"
branch_labels = None
depends_on = None

TABLE = "sqla_queue_jobs"


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("meta", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
                  if_not_exists=True)


def downgrade() -> None:
    op.drop_column(TABLE, "meta", if_exists=True)
