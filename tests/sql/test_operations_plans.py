"""The stats, doctor and retention statements as PostgreSQL plans them on a table that is mostly
finished jobs: each must be served by the index docs/how-to/operations.md names, never by a
sequential scan of the job table."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from plan_helpers import indexes_used, plan_of, seq_scanned
from sqlalchemy import create_engine, text

import sqla_queue as sq
from sqla_queue.models import counters_table, queues_table, samples_table, workers_table
from sqla_queue.sql import catalog, counters, operator_actions, prune, recover, samples, stats, workers

JOBS = sq.Job.__table__
COUNTERS = counters_table(JOBS)
SAMPLES = samples_table(JOBS)
WINDOW = {"window": timedelta(minutes=15)}


@pytest.fixture(scope="module")
def big(create_database):
    """100,000 completed and 5,000 failed jobs over four weeks, a few hundred active ones, and a
    week of per-minute counters and samples; analyzed."""
    engine = create_engine(create_database())
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs (queue_name, task, payload, status, attempts, run_at,"
            " locked_at, completed_at)"
            " SELECT CASE WHEN g % 3 = 0 THEN 'images' ELSE 'default' END, 'send_email', '{}',"
            " 'completed', 1, now() - make_interval(secs => g * 24), now() - make_interval(secs => g * 24),"
            " now() - make_interval(secs => g * 24 - 1) FROM generate_series(1, 100000) AS g"
        ))
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs (queue_name, task, payload, status, attempts, run_at,"
            " locked_at, failed_at, last_error)"
            " SELECT 'default', 'send_email', '{}', 'failed', 5, now(), now(),"
            " now() - make_interval(secs => g * 480), 'boom' FROM generate_series(1, 5000) AS g"
        ))
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs (queue_name, task, payload, run_at)"
            " SELECT CASE WHEN g % 2 = 0 THEN 'images' ELSE 'default' END, 'send_email', '{}',"
            " now() + make_interval(secs => g - 200) FROM generate_series(1, 400) AS g"
        ))
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs (queue_name, task, payload, status, attempts, locked_at,"
            " claim_token) SELECT 'default', 'send_email', '{}', 'running', 1,"
            " now() - make_interval(secs => g), 't' FROM generate_series(1, 30) AS g"
        ))
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs_counters (bucket, queue_name, kind, events)"
            " SELECT date_trunc('minute', now()) - make_interval(mins => g), q, 'empty_scheduled', 1"
            " FROM generate_series(0, 10079) AS g, unnest(ARRAY['default', 'images']) AS q"
        ))
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs_samples (bucket, queue_name, pending)"
            " SELECT date_trunc('minute', now()) - make_interval(mins => g), q, 1"
            " FROM generate_series(2, 10079) AS g, unnest(ARRAY['default', 'images']) AS q"
        ))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE sqla_queue_jobs"))
        conn.execute(text("VACUUM ANALYZE sqla_queue_jobs_counters"))
        conn.execute(text("VACUUM ANALYZE sqla_queue_jobs_samples"))
    yield engine
    engine.dispose()


def assert_served_by(plan, index: str) -> None:
    assert index in indexes_used(plan), plan
    assert not seq_scanned(plan) & {"sqla_queue_jobs", "sqla_queue_jobs_counters", "sqla_queue_jobs_samples"}, plan


ACTIVE_STATE_INDEXES = ("sqla_queue_jobs_waiting_idx", "sqla_queue_jobs_pending_claim_idx",
                        "sqla_queue_jobs_running_expiry_idx")


def test_the_active_aggregate_reads_each_active_states_index_not_the_finished_jobs(big):
    """Waiting, pending and running rows through their partial indexes: the active-key index
    holds keyed jobs only (revision sqlaq_0015)."""
    plan = plan_of(big, stats.queue_health(JOBS))
    for index in ACTIVE_STATE_INDEXES:
        assert_served_by(plan, index)


def test_completions_in_the_window_are_a_range_on_the_completed_at_index(big):
    assert_served_by(plan_of(big, stats.completed_in_window(JOBS), WINDOW), "sqla_queue_jobs_completed_at_idx")


def test_failures_in_the_window_are_a_range_on_the_failed_at_index(big):
    assert_served_by(plan_of(big, stats.failed_in_window(JOBS), WINDOW), "sqla_queue_jobs_failed_at_idx")


def test_counters_in_the_window_are_a_range_on_their_primary_key(big):
    assert_served_by(plan_of(big, stats.counted_in_window(COUNTERS), WINDOW), "pk_sqla_queue_jobs_counters")


def test_empty_claim_classification_probes_the_pending_claim_index(big):
    plan = plan_of(big, counters.count_empty_claim(JOBS, COUNTERS), {"queues": ["default"], "events": [1]})
    assert_served_by(plan, "sqla_queue_jobs_pending_claim_idx")


@pytest.mark.parametrize("statement", [recover.requeue_expired, recover.fail_exhausted_expired, recover.cancel_expired])
def test_lease_recovery_reads_the_running_indexes_not_the_finished_jobs(big, statement):
    """Both arms of the expiry test (the holder's lease end; ``locked_at`` for rows claimed
    before sqlaq_0008) are served by the partial indexes of running jobs, never by a scan of
    the finished ones."""
    plan = plan_of(big, statement(JOBS), {"lease": timedelta(minutes=2), "limit": 100})
    assert indexes_used(plan) & {"sqla_queue_jobs_running_expiry_idx", "sqla_queue_jobs_running_unleased_idx"}, plan
    assert not seq_scanned(plan) & {"sqla_queue_jobs"}, plan


def test_doctor_reads_of_the_job_table_use_the_running_and_failed_indexes(big):
    stuck = plan_of(big, catalog.stuck_running(JOBS), {"grace": timedelta(minutes=1), "lease": timedelta(minutes=2)})
    failed = plan_of(big, catalog.recent_failures(JOBS), {"since": timedelta(hours=1)})
    assert indexes_used(stuck) & {"sqla_queue_jobs_running_expiry_idx", "sqla_queue_jobs_running_unleased_idx"}, stuck
    assert not seq_scanned(stuck) & {"sqla_queue_jobs"}, stuck
    assert_served_by(failed, "sqla_queue_jobs_failed_at_idx")


@pytest.mark.parametrize(("status", "index"), [
    (sq.JobStatus.COMPLETED, "sqla_queue_jobs_completed_at_idx"),
    (sq.JobStatus.FAILED, "sqla_queue_jobs_failed_at_idx"),
])
def test_pruning_walks_the_finished_at_index_from_the_oldest(big, status, index):
    plan = plan_of(big, prune.prune_finished(JOBS, status), {"age": timedelta(days=7), "limit": 1000})
    assert_served_by(plan, index)


def test_a_sample_reads_what_stats_reads_bounded_to_one_minute(big):
    plan = plan_of(big, samples.record_sample(JOBS, COUNTERS, SAMPLES), {"retention": timedelta(days=7)})
    for index in (*ACTIVE_STATE_INDEXES, "sqla_queue_jobs_completed_at_idx",
                  "sqla_queue_jobs_failed_at_idx", "pk_sqla_queue_jobs_counters", "pk_sqla_queue_jobs_samples"):
        assert_served_by(plan, index)


@pytest.mark.parametrize("by_queue", [False, True])
def test_history_is_a_range_on_the_samples_primary_key(big, by_queue):
    params = {"since": timedelta(days=1), "queue": "images"}
    assert_served_by(plan_of(big, samples.history(SAMPLES, by_queue=by_queue), params), "pk_sqla_queue_jobs_samples")


def test_doctors_eligible_demand_reads_only_pending_rows_through_a_partial_index(big):
    """The unserved-queue, deploy-skew and latency checks: the eligible jobs are aggregated
    through a partial index of active rows, never by a scan of the finished ones."""
    plan = plan_of(big, workers.eligible_demand(JOBS, workers_table(JOBS), queues_table(JOBS)))
    assert indexes_used(plan) & {"sqla_queue_jobs_pending_claim_idx", "sqla_queue_jobs_active_key_idx"}, plan
    assert not seq_scanned(plan) & {"sqla_queue_jobs"}, plan


def test_the_worker_list_reads_each_workers_running_jobs_through_the_running_index(big):
    plan = plan_of(big, workers.list_workers(JOBS, workers_table(JOBS)))
    assert not seq_scanned(plan) & {"sqla_queue_jobs"}, plan


def test_workers_seen_reads_running_jobs_and_ranges_of_finished_ones(big):
    plan = plan_of(big, stats.workers_seen(JOBS), {"within": timedelta(minutes=15)})
    for index in ("sqla_queue_jobs_running_expiry_idx", "sqla_queue_jobs_completed_at_idx",
                  "sqla_queue_jobs_failed_at_idx"):
        assert_served_by(plan, index)


def test_a_page_filtered_by_creation_time_walks_the_primary_key_newest_first(big):
    statement = operator_actions.list_jobs(JOBS, created_after=True, created_before=True)
    params = {"created_after": datetime.now(timezone.utc) - timedelta(days=1),
              "created_before": datetime.now(timezone.utc), "limit": 51}
    assert_served_by(plan_of(big, statement, params), "pk_sqla_queue_jobs")
