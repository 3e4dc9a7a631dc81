"""Fair turns planned on a table shaped like production: the fair claim reads the turns index
and updates by primary key, never scanning the job table; an enqueue into a queue that is not
fair never reads the turns indexes."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from plan_helpers import indexes_used, insert_grouped_history, plan_nodes, plan_of, seq_scanned
from sqlalchemy import create_engine, text

import sqla_queue as sq
from sqla_queue.sql.catalog import explain
from sqla_queue.sql.claim.fair import claim_fair_jobs
from sqla_queue.sql.enqueue import INPUT_COLUMNS, insert_job
from sqla_queue.sql.limits import LIMIT_COLUMNS

pytestmark = pytest.mark.slow

TABLE = sq.Job.__table__
KNOWN = {f"known_{name}": None for name in LIMIT_COLUMNS}
PARAMS = {"queue": "default", "worker_id": "plan-test", "limit": 10, "token": "t", "lease": sq.DEFAULT_LEASE,
          "tasks": None, **KNOWN, "known_fair": True}


@pytest.fixture(scope="module")
def fair_engine(create_database):
    """Its own database: 100,000 completed jobs, 50,000 pending with turns over 500 keys, the
    queue fair."""
    engine = create_engine(create_database())
    with engine.begin() as conn:
        insert_grouped_history(conn)
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs (queue_name, task, payload, run_at, group_key, fair_tag)"
            " SELECT 'default', 'send_email', '{}', now() - make_interval(secs => g), 'key-' || (g % 500), g / 500"
            " FROM generate_series(1, 50000) AS g"))
        conn.execute(text("INSERT INTO sqla_queue_jobs_limits (queue_name, fair) VALUES ('default', true)"))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE sqla_queue_jobs"))
    yield engine
    engine.dispose()


def test_the_fair_claim_reads_the_turns_index_and_updates_by_primary_key(fair_engine):
    plan = plan_of(fair_engine, claim_fair_jobs(TABLE), PARAMS)
    assert {"sqla_queue_jobs_pending_fair_idx", "pk_sqla_queue_jobs"} <= indexes_used(plan), indexes_used(plan)
    assert "sqla_queue_jobs" not in seq_scanned(plan), plan


def test_an_enqueue_into_a_queue_that_is_not_fair_reads_no_turn(fair_engine):
    """The turn's two index reads run only for a fair queue's job: for another queue's, EXPLAIN
    ANALYZE shows them never executed (run and rolled back)."""
    params = {**dict.fromkeys(INPUT_COLUMNS), "queue_name": "other", "task": "send_email", "payload": "{}",
              "max_attempts": 3, "priority": 0, "group_key": "key-1", "delay": timedelta(0), "notify": False,
              "channel": "c"}
    with fair_engine.connect() as conn:
        [[document]] = conn.execute(explain(insert_job(TABLE), analyze=True), params).all()
        conn.rollback()
    plan = (document if isinstance(document, list) else json.loads(document))[0]["Plan"]
    turn_reads = [node for node in plan_nodes(plan)
                  if node.get("Index Name") in ("sqla_queue_jobs_pending_fair_idx", "sqla_queue_jobs_pending_key_turn_idx")]
    assert turn_reads and all(node["Actual Loops"] == 0 for node in turn_reads), turn_reads
