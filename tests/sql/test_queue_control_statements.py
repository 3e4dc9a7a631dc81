"""The queue-control statements (pause, resume, queue states, cancel, the cancelled signals and
their pruning): their shape compiled for PostgreSQL, and their plans on a table that is mostly
finished jobs, where none may scan the job table."""

from __future__ import annotations

from datetime import timedelta

import pytest
from plan_helpers import indexes_used, plan_of, seq_scanned
from sqlalchemy import create_engine, text
from test_operations_statements import rendered

import sqla_queue as sq
from sqla_queue.models import queues_table
from sqla_queue.sql import operator_actions, prune, queues, stats

JOBS = sq.Job.__table__
QUEUES = queues_table(JOBS)


def test_pause_is_an_upsert_that_keeps_the_first_pause_time():
    text_ = rendered(queues.pause_queue(QUEUES))
    assert text_.startswith("INSERT INTO sqla_queue_jobs_queues (queue_name, paused_at) VALUES (%(queue)s")
    assert ", clock_timestamp()) ON CONFLICT" in text_
    assert "ON CONFLICT (queue_name) DO UPDATE SET paused_at = coalesce(sqla_queue_jobs_queues.paused_at, excluded.paused_at)" in text_


def test_queue_states_count_active_jobs_only():
    text_ = rendered(queues.queue_states(JOBS, QUEUES))
    assert "WHERE sqla_queue_jobs.status = 'pending' OR sqla_queue_jobs.status = 'running' GROUP BY" in text_
    assert "FULL OUTER JOIN" in text_ and "'completed'" not in text_
    assert "%(queue)s" not in text_
    assert rendered(queues.queue_states(JOBS, QUEUES, one=True)).count("= %(queue)s") == 2


def test_cancel_is_one_statement_deciding_on_the_locked_row_and_announcing_the_finish():
    text_ = rendered(operator_actions.cancel_job(JOBS))
    # RECURSIVE: the statement also settles the jobs waiting for a job it cancels (sql/dependencies.py)
    assert text_.startswith("WITH RECURSIVE target AS (SELECT sqla_queue_jobs.id AS id FROM sqla_queue_jobs WHERE")
    assert "status IN ('waiting', 'pending', 'running') FOR UPDATE SKIP LOCKED" in text_
    assert "status=CASE WHEN (sqla_queue_jobs.status IN ('pending', 'waiting')) THEN 'cancelled' ELSE sqla_queue_jobs.status END" in text_
    assert "coalesce(sqla_queue_jobs.cancel_requested_at, clock_timestamp())" in text_
    assert "SELECT pg_notify(" in text_
    assert "FROM changed WHERE changed.watched AND changed.status = 'cancelled'" in text_
    assert text_.endswith("FROM changed LEFT OUTER JOIN changed_released_announced ON true LEFT OUTER JOIN changed_woken ON true "
                              "LEFT OUTER JOIN changed_parents_missed ON true "
                          "LEFT OUTER JOIN changed_announced ON true")


def test_cancelled_jobs_have_their_window_and_their_pruning():
    assert "sqla_queue_jobs.cancelled_at >= now() - %(window)s" in rendered(stats.cancelled_in_window(JOBS))
    text_ = rendered(prune.prune_finished(JOBS, sq.JobStatus.CANCELLED))
    assert "sqla_queue_jobs.status = 'cancelled'" in text_ and "ORDER BY sqla_queue_jobs.cancelled_at" in text_


@pytest.fixture(scope="module")
def big(create_database):
    """50,000 completed and 5,000 cancelled jobs over weeks, 200 pending, 20 running, 3 paused
    queues; analyzed."""
    engine = create_engine(create_database())
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs (queue_name, task, payload, status, attempts, run_at,"
            " locked_at, completed_at) SELECT 'q' || (g % 5), 't', '{}', 'completed', 1,"
            " now() - make_interval(secs => g * 40), now() - make_interval(secs => g * 40),"
            " now() - make_interval(secs => g * 40) FROM generate_series(1, 50000) AS g"))
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs (queue_name, task, payload, status, run_at, cancelled_at)"
            " SELECT 'q' || (g % 5), 't', '{}', 'cancelled', now(), now() - make_interval(secs => g * 400)"
            " FROM generate_series(1, 5000) AS g"))
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs (queue_name, task, payload, run_at)"
            " SELECT 'q' || (g % 5), 't', '{}', now() FROM generate_series(1, 200) AS g"))
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs (queue_name, task, payload, status, attempts, locked_at, claim_token)"
            " SELECT 'q1', 't', '{}', 'running', 1, now(), 't' FROM generate_series(1, 20) AS g"))
        conn.execute(text("INSERT INTO sqla_queue_jobs_queues (queue_name, paused_at)"
                          " VALUES ('q1', now()), ('q2', now()), ('idle', now())"))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE sqla_queue_jobs"))
        conn.execute(text("VACUUM ANALYZE sqla_queue_jobs_queues"))
    yield engine
    engine.dispose()


def test_queue_states_never_scan_the_job_table(big):
    for statement, params in ((queues.queue_states(JOBS, QUEUES), {}),
                              (queues.queue_states(JOBS, QUEUES, one=True), {"queue": "q1"})):
        plan = plan_of(big, statement, params)
        assert "sqla_queue_jobs" not in seq_scanned(plan), plan
        assert indexes_used(plan) & {"sqla_queue_jobs_active_key_idx", "sqla_queue_jobs_pending_claim_idx"}, plan


def test_cancelled_in_the_window_is_a_range_on_the_cancelled_at_index(big):
    plan = plan_of(big, stats.cancelled_in_window(JOBS), {"window": timedelta(minutes=15)})
    assert "sqla_queue_jobs_cancelled_at_idx" in indexes_used(plan) and not seq_scanned(plan), plan


def test_pruning_cancelled_jobs_walks_the_cancelled_at_index(big):
    plan = plan_of(big, prune.prune_finished(JOBS, sq.JobStatus.CANCELLED), {"age": timedelta(days=7), "limit": 1000})
    assert "sqla_queue_jobs_cancelled_at_idx" in indexes_used(plan) and "sqla_queue_jobs" not in seq_scanned(plan), plan


def test_cancel_finds_its_job_by_primary_key(big):
    plan = plan_of(big, operator_actions.cancel_job(JOBS), {"job_id": 7})
    # the dependencies table is empty here, and its reads are gated (tests/sql/test_dependency_plans.py)
    assert "pk_sqla_queue_jobs" in indexes_used(plan) and not seq_scanned(plan) - {"sqla_queue_jobs_dependencies"}, plan
