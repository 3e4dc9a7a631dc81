"""Workflows: the waiting state, dependency counts on each job and the dependencies table.

Revision ID: sqlaq_0012
Revises: sqlaq_0011
Create Date: 2026-12-04

Frozen: never edit this file once released; change the schema in a new revision.

Safe on a live queue. ``waiting_on`` and ``dependents`` are integer columns with a constant
default, a catalog-only change (a brief ACCESS EXCLUSIVE lock, no rewrite); their CHECKs and
the widened status CHECK are added NOT VALID and validated afterwards, under a lock that lets
enqueues and claims go on. The dependencies table starts empty. A waiting job holds its
idempotency key like a pending one, so the active-key unique index gains ``'waiting'`` in its
predicate: the new index is built CONCURRENTLY under a temporary name while the old one still
enforces the keys, then takes its name. Every step can be re-run after an interruption.

Downgrade cancels waiting jobs (the earlier schema has no such state; they would never run)
and drops the table and the columns, with every job's dependencies.
"""

import sqlalchemy as sa

from alembic import op

revision = "sqlaq_0012"
down_revision = "sqlaq_0011"
branch_labels = None
depends_on = None

TABLE = "sqla_queue_jobs"
DEPENDENCIES = "sqla_queue_jobs_dependencies"
DEPENDENCIES_JOB_INDEX = "sqla_queue_jobs_dependencies_job_idx"
KEY_INDEX = "sqla_queue_jobs_active_key_idx"
BUILDING = "sqla_queue_jobs_active_key_idx_building"
STATUS_CHECK = "ck_sqla_queue_jobs_status"
STATUSES_BEFORE = "('pending', 'running', 'completed', 'failed', 'cancelled')"
STATUSES_AFTER = "('waiting', 'pending', 'running', 'completed', 'failed', 'cancelled')"
ACTIVE_BEFORE = "status IN ('pending', 'running')"
ACTIVE_AFTER = "status IN ('waiting', 'pending', 'running')"
COUNTS = ("waiting_on", "dependents")


def upgrade() -> None:
    for name in COUNTS:
        op.add_column(TABLE, sa.Column(name, sa.Integer(), nullable=False, server_default=sa.text("0")),
                      if_not_exists=True)
        _replace_check(f"ck_sqla_queue_jobs_{name}", f"{name} >= 0")
    _replace_check(STATUS_CHECK, f"status IN {STATUSES_AFTER}")
    op.create_table(
        DEPENDENCIES,
        sa.Column("depends_on", sa.BigInteger(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("run_anyway", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.PrimaryKeyConstraint("depends_on", "job_id", name="pk_sqla_queue_jobs_dependencies"),
        if_not_exists=True,
    )
    with op.get_context().autocommit_block():
        for name in COUNTS:
            op.execute(f"ALTER TABLE {TABLE} VALIDATE CONSTRAINT ck_sqla_queue_jobs_{name}")
        op.execute(f"ALTER TABLE {TABLE} VALIDATE CONSTRAINT {STATUS_CHECK}")
        op.drop_index(DEPENDENCIES_JOB_INDEX, table_name=DEPENDENCIES, postgresql_concurrently=True, if_exists=True)
        op.create_index(DEPENDENCIES_JOB_INDEX, DEPENDENCIES, ["job_id"], postgresql_concurrently=True)
        # The active-key index with 'waiting', built beside the old one, then in its place.
        op.drop_index(BUILDING, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
        op.create_index(BUILDING, TABLE, ["idempotency_key"], unique=True, postgresql_where=sa.text(ACTIVE_AFTER),
                        postgresql_concurrently=True)
        op.drop_index(KEY_INDEX, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
        op.execute(f"ALTER INDEX {BUILDING} RENAME TO {KEY_INDEX}")


def downgrade() -> None:
    op.execute(f"UPDATE {TABLE} SET status = 'cancelled', cancelled_at = clock_timestamp(), "
               "last_error = 'cancelled by the downgrade of revision sqlaq_0012' WHERE status = 'waiting'")
    with op.get_context().autocommit_block():
        op.drop_index(BUILDING, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
        op.create_index(BUILDING, TABLE, ["idempotency_key"], unique=True, postgresql_where=sa.text(ACTIVE_BEFORE),
                        postgresql_concurrently=True)
        op.drop_index(KEY_INDEX, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
        op.execute(f"ALTER INDEX {BUILDING} RENAME TO {KEY_INDEX}")
    _replace_check(STATUS_CHECK, f"status IN {STATUSES_BEFORE}")
    op.drop_table(DEPENDENCIES, if_exists=True)
    for name in reversed(COUNTS):
        op.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT IF EXISTS ck_sqla_queue_jobs_{name}")
        op.drop_column(TABLE, name, if_exists=True)
    with op.get_context().autocommit_block():
        op.execute(f"ALTER TABLE {TABLE} VALIDATE CONSTRAINT {STATUS_CHECK}")


def _replace_check(name: str, condition: str) -> None:
    op.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT IF EXISTS {name}")
    op.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {name} CHECK ({condition}) NOT VALID")
