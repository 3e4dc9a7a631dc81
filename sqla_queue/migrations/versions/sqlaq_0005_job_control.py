"""Scheduling and job control: priorities, cancelled, snoozes, results, waits, paused queues, schedules.

Revision ID: sqlaq_0005
Revises: sqlaq_0004
Create Date: 2026-12-12

Frozen: never edit this file once released; change the schema in a new revision.

Safe on a live queue. The new columns are nullable or have a constant default, which is a
catalog-only change (a brief ACCESS EXCLUSIVE lock, no table rewrite). The widened status CHECK
and the snoozes CHECK are added NOT VALID (no scan under that lock) and validated afterwards,
which only takes a lock that lets enqueues and claims go on. The new claim index (priority
first after the queue) is built CONCURRENTLY under a temporary name while the old one still
serves claims, then the old one is dropped and the new one renamed. Every step is written to be
re-run after an interruption: columns and tables only if missing, constraints and the temporary
index dropped (if present) before they are made again.

Downgrade deletes cancelled jobs (the earlier schema has no such state; cancelling a job there
deleted it) and drops the columns with their data: priorities, results and schedule state.
"""

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision = "sqlaq_0005"
down_revision = "sqlaq_0004"
branch_labels = None
depends_on = None

TABLE = "sqla_queue_jobs"
CLAIM_INDEX = "sqla_queue_jobs_pending_claim_idx"
BUILDING = "sqla_queue_jobs_pending_claim_idx_building"
CANCELLED_INDEX = "sqla_queue_jobs_cancelled_at_idx"
STATUS_CHECK = "ck_sqla_queue_jobs_status"
SNOOZES_CHECK = "ck_sqla_queue_jobs_snoozes"
STATUSES_BEFORE = "('pending', 'running', 'completed', 'failed')"
STATUSES_AFTER = "('pending', 'running', 'completed', 'failed', 'cancelled')"
COLUMNS = (
    ("priority", sa.SmallInteger(), False, sa.text("0")),
    ("snoozes", sa.Integer(), False, sa.text("0")),
    ("scheduled_at", sa.DateTime(timezone=True), True, None),
    ("cancel_requested_at", sa.DateTime(timezone=True), True, None),
    ("cancelled_at", sa.DateTime(timezone=True), True, None),
    ("result", postgresql.JSONB(), True, None),
    ("watched", sa.Boolean(), False, sa.false()),
)


def upgrade() -> None:
    for name, type_, nullable, default in COLUMNS:
        op.add_column(TABLE, sa.Column(name, type_, nullable=nullable, server_default=default),
                      if_not_exists=True)
    _replace_check(STATUS_CHECK, f"status IN {STATUSES_AFTER}")
    _replace_check(SNOOZES_CHECK, "snoozes >= 0")
    op.create_table(
        "sqla_queue_jobs_queues",
        sa.Column("queue_name", sa.Text(), nullable=False),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("queue_name", name="pk_sqla_queue_jobs_queues"),
        if_not_exists=True,
    )
    op.create_table(
        "sqla_queue_jobs_schedules",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("last_tick", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_sqla_queue_jobs_schedules"),
        if_not_exists=True,
    )
    with op.get_context().autocommit_block():
        op.execute(f"ALTER TABLE {TABLE} VALIDATE CONSTRAINT {STATUS_CHECK}")
        op.execute(f"ALTER TABLE {TABLE} VALIDATE CONSTRAINT {SNOOZES_CHECK}")
        # The new claim index is built beside the old one, then takes its place.
        op.drop_index(BUILDING, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
        op.create_index(BUILDING, TABLE, ["queue_name", sa.text("priority DESC"), "run_at", "id"],
                        postgresql_where=sa.text("status = 'pending'"), postgresql_concurrently=True)
        op.drop_index(CLAIM_INDEX, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
        op.execute(f"ALTER INDEX {BUILDING} RENAME TO {CLAIM_INDEX}")
        op.drop_index(CANCELLED_INDEX, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
        op.create_index(CANCELLED_INDEX, TABLE, ["cancelled_at"], postgresql_where=sa.text("status = 'cancelled'"),
                        postgresql_concurrently=True)


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index(CANCELLED_INDEX, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
        op.drop_index(BUILDING, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
        op.create_index(BUILDING, TABLE, ["queue_name", "run_at", "id"],
                        postgresql_where=sa.text("status = 'pending'"), postgresql_concurrently=True)
        op.drop_index(CLAIM_INDEX, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
        op.execute(f"ALTER INDEX {BUILDING} RENAME TO {CLAIM_INDEX}")
    op.execute(f"DELETE FROM {TABLE} WHERE status = 'cancelled'")
    _replace_check(STATUS_CHECK, f"status IN {STATUSES_BEFORE}")
    op.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT IF EXISTS {SNOOZES_CHECK}")
    op.drop_table("sqla_queue_jobs_schedules", if_exists=True)
    op.drop_table("sqla_queue_jobs_queues", if_exists=True)
    for name, *_ in reversed(COLUMNS):
        op.drop_column(TABLE, name, if_exists=True)
    with op.get_context().autocommit_block():
        op.execute(f"ALTER TABLE {TABLE} VALIDATE CONSTRAINT {STATUS_CHECK}")


def _replace_check(name: str, condition: str) -> None:
    op.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT IF EXISTS {name}")
    op.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {name} CHECK ({condition}) NOT VALID")

