"""Add sqla_queue_jobs_workers: the worker registry, one row per live (or lately dead) worker.

Revision ID: sqlaq_0010
Revises: sqlaq_0009
Create Date: 2026-12-04

Frozen: never edit this file once released; change the schema in a new revision.

Each worker process inserts its row at start (host, pid, version, the queues it serves, the
tasks it registers, its concurrency), rewrites its heartbeat on every beat of its lease keeper,
and deletes the row on a clean exit; `sqla-queue workers`, the dashboard's Workers page and
doctor read it. Safe on a live queue: a new, empty table takes no lock on the job table, and
the whole revision is one transaction. Workers older than this revision simply do not appear
in it. Downgrade drops the registry.
"""

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision = "sqlaq_0010"
down_revision = "sqlaq_0009"
branch_labels = None
depends_on = None

TABLE = "sqla_queue_jobs_workers"


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("version", sa.Text(), nullable=False),
        sa.Column("queues", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("tasks", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("state", sa.Text(), server_default=sa.text("'running'"), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("state IN ('running', 'stopping')", name="ck_sqla_queue_jobs_workers_state"),
        sa.PrimaryKeyConstraint("id", name="pk_sqla_queue_jobs_workers"),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_table(TABLE, if_exists=True)
