"""Add sqla_queue_jobs_counters: per-minute counts of events that leave no trace on job rows.

Revision ID: sqlaq_0003
Revises: sqlaq_0002
Create Date: 2026-12-05

Frozen: never edit this file once released; change the schema in a new revision.

Expired-lease recoveries, retries and claims that came back empty while jobs were pending are
health signals that no job row remembers, so they are counted here: one row per (minute,
queue, kind), upserted in the transaction of the event itself. Safe on a live queue: a new,
empty table takes no lock on the job table, and the whole revision is one transaction.
"""

import sqlalchemy as sa

from alembic import op

revision = "sqlaq_0003"
down_revision = "sqlaq_0002"
branch_labels = None
depends_on = None

TABLE = "sqla_queue_jobs_counters"


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("bucket", sa.DateTime(timezone=True), nullable=False),
        sa.Column("queue_name", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("bucket", "queue_name", "kind", name="pk_sqla_queue_jobs_counters"),
    )


def downgrade() -> None:
    op.drop_table(TABLE)
