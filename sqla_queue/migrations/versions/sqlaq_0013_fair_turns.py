"""Fair turns: sqla_queue_jobs.fair_tag with two partial indexes.

Revision ID: sqlaq_0013
Revises: sqlaq_0012
Create Date: 2026-12-04

Frozen: never edit this file once released; change the schema in a new revision.

Safe on a live queue. ``fair_tag`` is a nullable column without a default, a catalog-only change
(a brief ACCESS EXCLUSIVE lock, no rewrite). The indexes cover only rows with a turn
(``fair_tag IS NOT NULL``), so on an existing queue they start empty, and they are built
CONCURRENTLY, so enqueues and claims go on; a leftover invalid index from an interrupted build is
dropped first, so the revision can run again. A queue that is fair already gets its pending jobs'
turns from the next ``set_limits(..., fair=True)``; until then its claims take the jobs enqueued
after the upgrade (docs/how-to/limits.md). Downgrade drops the indexes and the column.
"""

import sqlalchemy as sa

from alembic import op

revision = "sqlaq_0013"
down_revision = "sqlaq_0012"
branch_labels = None
depends_on = None

TABLE = "sqla_queue_jobs"
FAIR_INDEX = "sqla_queue_jobs_pending_fair_idx"
KEY_TURN_INDEX = "sqla_queue_jobs_pending_key_turn_idx"
WITH_TURN = "status = 'pending' AND fair_tag IS NOT NULL"


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("fair_tag", sa.BigInteger(), nullable=True), if_not_exists=True)
    with op.get_context().autocommit_block():
        for name, columns in ((FAIR_INDEX, ["queue_name", "fair_tag", sa.text("priority DESC"), "run_at", "id"]),
                              (KEY_TURN_INDEX, ["queue_name", "group_key", "fair_tag"])):
            op.drop_index(name, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
            op.create_index(name, TABLE, columns, postgresql_where=sa.text(WITH_TURN), postgresql_concurrently=True)


def downgrade() -> None:
    with op.get_context().autocommit_block():
        for name in (KEY_TURN_INDEX, FAIR_INDEX):
            op.drop_index(name, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
    op.drop_column(TABLE, "fair_tag", if_exists=True)
