"""Add flow control: sqla_queue_jobs.group_key with two partial indexes, limits, key buckets.

Revision ID: sqlaq_0011
Revises: sqlaq_0010
Create Date: 2026-12-04

Frozen: never edit this file once released; change the schema in a new revision.

Safe on a live queue. ``group_key`` is a nullable column without a default, a catalog-only
change (a brief ACCESS EXCLUSIVE lock, no rewrite). The two new tables are empty. The indexes
cover only grouped rows (``group_key IS NOT NULL``), so on an existing queue they start empty,
and they are built CONCURRENTLY, so enqueues and claims go on; a leftover invalid index from an
interrupted build is dropped first, so the revision can run again. Downgrade drops the indexes,
the tables (every queue's limits with them) and the column (every job's group key with it).
"""

import sqlalchemy as sa

from alembic import op

revision = "sqlaq_0011"
down_revision = "sqlaq_0010"
branch_labels = None
depends_on = None

TABLE = "sqla_queue_jobs"
LIMITS = "sqla_queue_jobs_limits"
GROUP_RATES = "sqla_queue_jobs_group_rates"
PENDING_GROUP_INDEX = "sqla_queue_jobs_pending_group_idx"
RUNNING_GROUP_INDEX = "sqla_queue_jobs_running_group_idx"


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("group_key", sa.Text(), nullable=True), if_not_exists=True)
    op.create_table(
        LIMITS,
        sa.Column("queue_name", sa.Text(), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=True),
        sa.Column("group_concurrency", sa.Integer(), nullable=True),
        sa.Column("rate", sa.Integer(), nullable=True),
        sa.Column("rate_period", sa.Interval(), nullable=True),
        sa.Column("group_rate", sa.Integer(), nullable=True),
        sa.Column("group_rate_period", sa.Interval(), nullable=True),
        sa.Column("fair", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("tokens", sa.Float(), nullable=True),
        sa.Column("refilled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_group_key", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("queue_name", name="pk_sqla_queue_jobs_limits"),
        if_not_exists=True,
    )
    op.create_table(
        GROUP_RATES,
        sa.Column("queue_name", sa.Text(), nullable=False),
        sa.Column("group_key", sa.Text(), nullable=False),
        sa.Column("tokens", sa.Float(), nullable=False),
        sa.Column("refilled_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("queue_name", "group_key", name="pk_sqla_queue_jobs_group_rates"),
        if_not_exists=True,
    )
    with op.get_context().autocommit_block():
        op.drop_index(PENDING_GROUP_INDEX, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
        op.create_index(PENDING_GROUP_INDEX, TABLE,
                        ["queue_name", "group_key", sa.text("priority DESC"), "run_at", "id"],
                        postgresql_where=sa.text("status = 'pending' AND group_key IS NOT NULL"),
                        postgresql_concurrently=True)
        op.drop_index(RUNNING_GROUP_INDEX, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
        op.create_index(RUNNING_GROUP_INDEX, TABLE, ["queue_name", "group_key"],
                        postgresql_where=sa.text("status = 'running' AND group_key IS NOT NULL"),
                        postgresql_concurrently=True)


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index(RUNNING_GROUP_INDEX, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
        op.drop_index(PENDING_GROUP_INDEX, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
    op.drop_table(GROUP_RATES, if_exists=True)
    op.drop_table(LIMITS, if_exists=True)
    op.drop_column(TABLE, "group_key", if_exists=True)
