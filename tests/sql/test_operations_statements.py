"""The operations statements compiled for PostgreSQL, without a database: their shape is the
contract the plan tests and the docs rely on (literal statuses for the partial indexes, SKIP
LOCKED on every operator write, bounded deletes, parameters for every value)."""

from __future__ import annotations

import pytest
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.orm import DeclarativeBase

import sqla_queue as sq
from sqla_queue.models import counters_table, queues_table, workers_table
from sqla_queue.sql import catalog, counters, operator_actions, prune, stats, workers

JOBS = sq.Job.__table__
COUNTERS = counters_table(JOBS)


class _Compiler(PGDialect_psycopg.statement_compiler):
    """Renders literal-execute values without asking for every bound value (there are none)."""

    def construct_params(self, *args, **kwargs):
        kwargs["_check"] = False
        return super().construct_params(*args, **kwargs)


class _Dialect(PGDialect_psycopg):
    statement_compiler = _Compiler


def rendered(statement) -> str:
    """SQL as psycopg receives it: our literal statuses inlined, every value a parameter."""
    compiled = statement.compile(dialect=_Dialect(), compile_kwargs={"render_postcompile": True})
    return " ".join(str(compiled).split())


def test_the_active_aggregate_asks_for_each_active_state_on_its_own():
    """One state per arm, each a partial index's predicate (the plan test: tests/sql/test_operations_plans.py)."""
    text = rendered(stats.queue_health(JOBS))
    assert "WHERE sqla_queue_jobs.status = 'waiting' OR sqla_queue_jobs.status = 'pending' OR sqla_queue_jobs.status = 'running' GROUP BY" in text
    assert "'completed'" not in text and "'failed'" not in text


def test_windowed_reads_bound_an_index_range_with_a_stable_now():
    for statement, column in ((stats.completed_in_window(JOBS), "completed_at"),
                              (stats.failed_in_window(JOBS), "failed_at")):
        text = rendered(statement)
        assert f"sqla_queue_jobs.{column} >= now() - %(window)s" in text
        assert "clock_timestamp" not in text  # volatile: could not bound an index scan
    assert "percentile_cont" in rendered(stats.completed_in_window(JOBS))
    assert "sqla_queue_jobs_counters.bucket >= date_trunc" in rendered(stats.counted_in_window(COUNTERS))


def test_counters_are_upserted_per_minute_queue_and_kind():
    text = rendered(counters.count_events(COUNTERS))
    assert "INSERT INTO sqla_queue_jobs_counters (bucket, queue_name, kind, events)" in text
    assert "ON CONFLICT (bucket, queue_name, kind) DO UPDATE SET events = " in text
    assert "date_trunc(%(date_trunc_2)s::VARCHAR, clock_timestamp())" in text


def test_empty_claim_classification_is_one_statement_in_reason_order():
    text = rendered(counters.count_empty_claim(JOBS, COUNTERS))
    assert text.count("WHEN (EXISTS (SELECT") == 4 and text.count("status = 'pending'") == 4
    assert "WHERE classified.kind IS NOT NULL" in text
    assert "RETURNING sqla_queue_jobs_counters.queue_name, sqla_queue_jobs_counters.kind" in text
    assert "FROM unnest(%(queues)s::TEXT[], %(events)s::BIGINT[]) AS asked(queue_name, events)" in text


@pytest.mark.parametrize(("builder", "status"), [
    (operator_actions.retry_failed_job, "= 'failed'"),
    (operator_actions.cancel_job, "IN ('waiting', 'pending', 'running')"),
])
def test_operator_writes_skip_locked_rows_and_inline_the_state_they_need(builder, status):
    text = rendered(builder(JOBS))
    assert "FOR UPDATE SKIP LOCKED" in text
    assert f"sqla_queue_jobs.status {status}" in text
    assert "sqla_queue_jobs.id = %(job_id)s" in text


def test_retry_now_checks_the_idempotency_key_is_free():
    text = rendered(operator_actions.retry_failed_job(JOBS))
    assert "NOT (EXISTS (SELECT" in text and "holder.status IN ('waiting', 'pending', 'running')" in text
    assert "greatest(sqla_queue_jobs.max_attempts, sqla_queue_jobs.attempts +" in text


@pytest.mark.parametrize(("status", "column"), [
    (sq.JobStatus.COMPLETED, "completed_at"),
    (sq.JobStatus.FAILED, "failed_at"),
])
def test_pruning_is_a_bounded_skip_locked_batch_of_one_status(status, column):
    text = rendered(prune.prune_finished(JOBS, status))
    assert f"sqla_queue_jobs.status = '{status.value}'" in text
    assert f"ORDER BY sqla_queue_jobs.{column}" in text and "LIMIT %(limit)s FOR UPDATE SKIP LOCKED" in text
    assert "sqla_queue_jobs.id = ANY (CAST((SELECT array_agg(doomed.id)" in text
    # active statuses appear only in the check of a job's live dependents (sql/dependencies.py),
    # which only rows with dependents > 0 make
    kept = "AND NOT (sqla_queue_jobs.dependents > %(dependents_1)s::INTEGER AND (EXISTS (SELECT * FROM "
    live = "(live_dependent.status = 'waiting' OR live_dependent.status = 'pending' OR live_dependent.status = 'running')"
    assert kept in text and live in text
    outside = text.replace(live, "")
    assert "'pending'" not in outside and "'running'" not in outside


def test_list_jobs_adds_only_the_filters_asked_for():
    plain = rendered(operator_actions.list_jobs(JOBS))
    filtered = rendered(operator_actions.list_jobs(JOBS, status=sq.JobStatus.FAILED, by_queue=True, by_task=True, paged=True))
    assert "WHERE" not in plain and "ORDER BY sqla_queue_jobs.id DESC" in plain
    for fragment in ("status = 'failed'", "queue_name = %(queue)s", "task = %(task)s", "id < %(before_id)s"):
        assert fragment in filtered


def test_catalog_reads_stay_in_this_database_where_the_check_is_about_it():
    assert "datname = current_database()" in rendered(catalog.long_transactions())
    assert "datname = current_database()" in rendered(catalog.lock_waits(JOBS))
    hidden = rendered(catalog.hidden_sessions())  # other roles' sessions, seen without pg_monitor
    assert "datname = current_database()" in hidden and "state IS NULL" in hidden
    horizon = rendered(catalog.horizon_backends())
    assert "AS in_scope" in horizon and "WHERE pg_catalog.pg_stat_activity.datname" not in horizon


def test_explain_wraps_the_real_statement_and_keeps_its_parameters():
    text = rendered(catalog.explain(sq.sql.claim_jobs(JOBS)))
    assert text.startswith("EXPLAIN (FORMAT JSON) WITH due_jobs AS")
    assert "%(queue)s" in text and "FOR UPDATE SKIP LOCKED" in text


def test_a_host_job_table_gets_its_own_counters_table():
    class HostBase(DeclarativeBase):
        pass

    class HostJob(sq.JobMixin, HostBase):
        __tablename__ = "host_jobs"

    table = HostBase.metadata.tables["host_jobs_counters"]
    assert counters_table(HostJob.__table__) is table
    assert [c.name for c in table.primary_key] == ["bucket", "queue_name", "kind"]
    assert "INSERT INTO host_jobs_counters" in rendered(counters.count_events(table))


# -- the dashboard's statements: bulk actions, samples, workers ------------------------------

def test_bulk_writes_lock_with_skip_locked_literal_statuses_and_a_bounded_batch():
    retry = rendered(operator_actions.retry_failed_jobs(JOBS, by_queue=True, by_task=True, by_ids=True))
    assert "WHERE sqla_queue_jobs.status = 'failed' AND sqla_queue_jobs.queue_name = %(queue)s" in retry
    assert "sqla_queue_jobs.task = %(task_name)s::VARCHAR AND sqla_queue_jobs.id = ANY (%(job_ids)s::BIGINT[])" in retry
    assert "ORDER BY sqla_queue_jobs.id LIMIT %(limit)s::INTEGER FOR UPDATE SKIP LOCKED" in retry
    assert "earlier.idempotency_key = sqla_queue_jobs.idempotency_key AND earlier.id < sqla_queue_jobs.id" in retry
    cancel = rendered(operator_actions.cancel_jobs(JOBS, (sq.JobStatus.PENDING,), by_queue=True))
    assert "WHERE sqla_queue_jobs.status = 'pending' AND sqla_queue_jobs.queue_name = %(queue)s" in cancel
    assert "LIMIT %(limit)s::INTEGER FOR UPDATE SKIP LOCKED" in cancel and "SELECT pg_notify(" in cancel


def test_the_single_and_bulk_actions_share_one_write():
    single = rendered(operator_actions.retry_failed_job(JOBS))
    bulk = rendered(operator_actions.retry_failed_jobs(JOBS))
    assert single.split("retried AS (", 1)[1] == bulk.split("retried AS (", 1)[1]
    single = rendered(operator_actions.cancel_job(JOBS))
    bulk = rendered(operator_actions.cancel_jobs(JOBS))
    assert single.split("changed AS (", 1)[1] == bulk.split("changed AS (", 1)[1]


def test_a_sample_is_written_once_per_minute_and_prunes_only_when_it_wrote():
    from sqla_queue.models import samples_table
    from sqla_queue.sql import samples

    text = rendered(samples.record_sample(JOBS, COUNTERS, samples_table(JOBS)))
    assert "WHERE NOT (EXISTS (SELECT * FROM sqla_queue_jobs_samples WHERE sqla_queue_jobs_samples.bucket =" in text
    assert "ON CONFLICT (bucket, queue_name) DO NOTHING" in text
    assert "DELETE FROM sqla_queue_jobs_samples WHERE sqla_queue_jobs_samples.bucket < now() - %(retention)s" in text
    assert "AND (EXISTS (SELECT * FROM written))" in text
    assert "WHERE sqla_queue_jobs.status = 'waiting' OR sqla_queue_jobs.status = 'pending' OR sqla_queue_jobs.status = 'running' GROUP BY" in text  # the stats aggregate
    assert "sqla_queue_jobs.status = 'completed' AND sqla_queue_jobs.completed_at >=" in text


def test_workers_seen_bounds_each_finished_state_by_its_own_time():
    text = rendered(stats.workers_seen(JOBS))
    for status, column in (("completed", "completed_at"), ("failed", "failed_at"), ("cancelled", "cancelled_at")):
        assert (f"sqla_queue_jobs.status = '{status}' AND sqla_queue_jobs.locked_by IS NOT NULL AND "
                f"sqla_queue_jobs.{column} >= now() - %(within)s") in text
    assert "sqla_queue_jobs.status = 'running' AND sqla_queue_jobs.locked_by IS NOT NULL UNION ALL" in text


WORKERS = workers_table(JOBS)


def test_a_workers_beat_is_one_upsert_on_its_id_timed_by_the_database():
    text = rendered(workers.beat(WORKERS))
    assert text.startswith("INSERT INTO sqla_queue_jobs_workers")
    assert "ON CONFLICT (id) DO UPDATE SET" in text and "started_at" not in text.split("DO UPDATE")[1]
    assert "heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at" in text
    assert "now(), now(), (now() + %(lease)s))" in text


def test_registering_sweeps_long_dead_workers_in_the_same_statement():
    text = rendered(workers.register(WORKERS))
    assert text.startswith("WITH pruned AS (DELETE FROM sqla_queue_jobs_workers WHERE "
                           "sqla_queue_jobs_workers.expires_at < now() - %(retention)s")
    assert "INSERT INTO sqla_queue_jobs_workers" in text


def test_eligible_demand_aggregates_the_claims_predicate_before_reading_the_registry():
    text = rendered(workers.eligible_demand(JOBS, WORKERS, queues_table(JOBS)))
    demand = text.split("FROM (", 1)[1]
    assert ("WHERE sqla_queue_jobs.status = 'pending' AND sqla_queue_jobs.run_at <= now() AND "
            "sqla_queue_jobs.attempts < sqla_queue_jobs.max_attempts GROUP BY sqla_queue_jobs.queue_name, "
            "sqla_queue_jobs.task) AS demand") in demand
    assert "sqla_queue_jobs_workers.expires_at > now() AND demand.queue_name = ANY (sqla_queue_jobs_workers.queues)" in text
    assert "demand.task = ANY (sqla_queue_jobs_workers.tasks)" in text
    assert "sqla_queue_jobs_queues.paused_at IS NOT NULL" in text
