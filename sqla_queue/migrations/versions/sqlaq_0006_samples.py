"""Add sqla_queue_jobs_samples: one row per (minute, queue), the history the dashboard plots.

Revision ID: sqlaq_0006
Revises: sqlaq_0005
Create Date: 2026-12-20

Frozen: never edit this file once released; change the schema in a new revision.

Workers sample each queue once a minute (backlog, completions, failures, retries, empty claims,
completion-duration percentiles) into this table and delete rows older than the retention in
the same statement (docs/how-to/operations.md). Safe on a live queue: a new, empty table takes
no lock on the job table, and the whole revision is one transaction. Downgrade drops the
history.
"""

import sqlalchemy as sa

from alembic import op

revision = "sqlaq_0006"
down_revision = "sqlaq_0005"
branch_labels = None
depends_on = None

TABLE = "sqla_queue_jobs_samples"
COUNTS = ("pending", "eligible", "scheduled", "running", "completed", "failed", "retried", "empty_claims")


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("bucket", sa.DateTime(timezone=True), nullable=False),
        sa.Column("queue_name", sa.Text(), nullable=False),
        *(sa.Column(name, sa.Integer(), server_default=sa.text("0"), nullable=False) for name in COUNTS),
        sa.Column("oldest_eligible_age", sa.Interval(), nullable=True),
        sa.Column("duration_p50", sa.Interval(), nullable=True),
        sa.Column("duration_p95", sa.Interval(), nullable=True),
        sa.PrimaryKeyConstraint("bucket", "queue_name", name="pk_sqla_queue_jobs_samples"),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_table(TABLE, if_exists=True)
