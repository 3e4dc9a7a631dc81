"""The limited claim (sql/claim/limited.py) compiled and planned on a table shaped like
production: grouped pending jobs behind many completed ones. Its key walk and per-key reads use
the grouped partial indexes and it never scans the job table."""

from __future__ import annotations

import pytest
from plan_helpers import indexes_used, insert_grouped_history, plan_of, seq_scanned
from sqlalchemy import create_engine, text
from sqlalchemy.dialects import postgresql

import sqla_queue as sq
from sqla_queue.sql.claim.limited import claim_limited_jobs
from sqla_queue.sql.limits import LIMIT_COLUMNS

pytestmark = pytest.mark.slow

TABLE = sq.Job.__table__
PARAMS = {"queue": "default", "worker_id": "plan-test", "limit": 10, "token": "t", "lease": sq.DEFAULT_LEASE,
          "tasks": None, "max_running": 20, "max_running_per_key": 1, "per_second": 100.0,
          "burst": 1.0, "ahead": 0.25, "group_per_second": 5.0, "group_burst": 1.0, **{f"known_{name}": None for name in LIMIT_COLUMNS}}


@pytest.fixture(scope="module")
def big_engine(create_database):
    """Its own database: 100,000 completed jobs, 50,000 pending over 500 keys, 200 running."""
    engine = create_engine(create_database())
    with engine.begin() as conn:
        insert_grouped_history(conn)
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs (queue_name, task, payload, run_at, group_key)"
            " SELECT 'default', 'send_email', '{}', now() - make_interval(secs => g), 'key-' || (g % 500)"
            " FROM generate_series(1, 50000) AS g"))
        conn.execute(text(
            "UPDATE sqla_queue_jobs SET status = 'running', attempts = 1, locked_at = now()"
            " WHERE id IN (SELECT id FROM sqla_queue_jobs WHERE status = 'pending' ORDER BY id LIMIT 200)"))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE sqla_queue_jobs"))
    yield engine
    engine.dispose()


def test_the_limited_claim_locks_skip_locked_and_inlines_its_statuses():
    compiled = str(claim_limited_jobs(TABLE, grouped=True, fair=True).compile(
        dialect=postgresql.dialect(), compile_kwargs={"literal_binds": False}))
    assert "FOR UPDATE SKIP LOCKED" in compiled and "WITH RECURSIVE" in compiled
    assert "RETURNING" in compiled and "UPDATE sqla_queue_jobs_limits" in compiled
    assert "INSERT INTO sqla_queue_jobs_group_rates" in compiled and "ON CONFLICT" in compiled


def test_the_grouped_claim_walks_the_grouped_indexes(big_engine):
    plan = plan_of(big_engine, claim_limited_jobs(TABLE, grouped=True, fair=True), PARAMS)
    used = indexes_used(plan)
    assert {"sqla_queue_jobs_pending_group_idx", "sqla_queue_jobs_running_group_idx"} <= used, used
    assert "sqla_queue_jobs" not in seq_scanned(plan), plan


def test_the_plain_limited_claim_reads_the_pending_index(big_engine):
    plan = plan_of(big_engine, claim_limited_jobs(TABLE, grouped=False), PARAMS)
    assert "sqla_queue_jobs_pending_claim_idx" in indexes_used(plan)
    assert "sqla_queue_jobs" not in seq_scanned(plan), plan
