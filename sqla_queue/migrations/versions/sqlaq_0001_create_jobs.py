"""Create the sqla_queue_jobs table, its CHECK constraints and partial indexes.

Revision ID: sqlaq_0001
Revises:
Create Date: 2026-11-29

Frozen: never edit this file once released; change the schema in a new revision.
"""

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision = "sqlaq_0001"
down_revision = None
branch_labels = ("sqla_queue",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sqla_queue_jobs",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("queue_name", sa.Text(), nullable=False),
        sa.Column("task", sa.Text(), nullable=False),
        sa.Column("payload", postgresql.JSONB(), nullable=False),
        sa.Column("status", sa.Text(), server_default=sa.text("'pending'"), nullable=False),
        sa.Column("run_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("max_attempts", sa.Integer(), server_default=sa.text("5"), nullable=False),
        sa.Column("locked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("locked_by", sa.Text(), nullable=True),
        sa.Column("claim_token", sa.Text(), nullable=True),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("idempotency_key", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "status IN ('pending', 'running', 'completed', 'failed')", name="ck_sqla_queue_jobs_status"
        ),
        sa.CheckConstraint("attempts >= 0", name="ck_sqla_queue_jobs_attempts"),
        sa.CheckConstraint("max_attempts > 0", name="ck_sqla_queue_jobs_max_attempts"),
        sa.PrimaryKeyConstraint("id", name="pk_sqla_queue_jobs"),
    )
    op.create_index(
        "sqla_queue_jobs_pending_claim_idx",
        "sqla_queue_jobs",
        ["queue_name", "run_at", "id"],
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_index(
        "sqla_queue_jobs_active_key_idx",
        "sqla_queue_jobs",
        ["idempotency_key"],
        unique=True,
        postgresql_where=sa.text("status IN ('pending', 'running')"),
    )
    op.create_index(
        "sqla_queue_jobs_running_lease_idx",
        "sqla_queue_jobs",
        ["locked_at", "id"],
        postgresql_where=sa.text("status = 'running'"),
    )


def downgrade() -> None:
    op.drop_table("sqla_queue_jobs")
