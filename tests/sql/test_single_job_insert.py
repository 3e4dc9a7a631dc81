"""The single-job INSERT is `insert_jobs` for one row: same columns, conflict rule, RETURNING and
notification, with scalar parameters instead of one-element arrays."""

from __future__ import annotations

from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

import sqla_queue as sq
from sqla_queue import sql
from sqla_queue.sql.enqueue import INPUT_COLUMNS

TABLE = sq.Job.__table__


def rendered(statement) -> str:
    text = statement.compile(dialect=PGDialect_psycopg()).construct_expanded_state(
        {**dict.fromkeys(INPUT_COLUMNS), **{f"{name}s": [] for name in INPUT_COLUMNS}, "channel": "", "notify": True}
    ).statement
    return " ".join(text.split())


def test_single_job_insert_has_the_batch_inserts_conflict_rule_returning_and_notify():
    one, many = rendered(sql.insert_job(TABLE)), rendered(sql.insert_jobs(TABLE))
    shared = [
        "INSERT INTO sqla_queue_jobs (queue_name, task, payload, run_at, max_attempts, idempotency_key, priority, "
        "scheduled_at, meta, group_key, fair_tag)",
        "ON CONFLICT DO NOTHING",
        "RETURNING sqla_queue_jobs.id, sqla_queue_jobs.idempotency_key, sqla_queue_jobs.queue_name",
        "SELECT inserted.id, inserted.idempotency_key, CASE WHEN %(notify)s THEN pg_notify(%(channel)s, inserted.queue_name) END AS notified",
    ]
    for fragment in shared:
        assert fragment in one and fragment in many
    assert "VALUES (%(queue_name)s" in one and "unnest(" not in one
    assert "coalesce(%(run_at)s::TIMESTAMP WITH TIME ZONE, now() + %(delay)s)" in one
    assert "CAST(%(payload)s::VARCHAR AS JSONB)" in one


def test_every_input_column_is_a_parameter_of_both_inserts():
    one, many = rendered(sql.insert_job(TABLE)), rendered(sql.insert_jobs(TABLE))
    for name in INPUT_COLUMNS:
        assert f"%({name})s" in one
        assert f"%({name}s)s" in many


def test_the_insert_for_a_queue_that_is_not_fair_writes_the_same_row_without_reading_turns():
    light, one = rendered(sql.insert_job_unless_fair(TABLE)), rendered(sql.insert_job(TABLE))
    assert ("INSERT INTO sqla_queue_jobs (queue_name, task, payload, run_at, max_attempts, idempotency_key, "
            "priority, scheduled_at, meta, group_key) SELECT") in light
    for fragment in ("ON CONFLICT DO NOTHING",
                     "RETURNING sqla_queue_jobs.id, sqla_queue_jobs.idempotency_key, sqla_queue_jobs.queue_name",
                     "coalesce(%(run_at)s::TIMESTAMP WITH TIME ZONE, now() + %(delay)s)",
                     "CAST(%(payload)s::VARCHAR AS JSONB)"):
        assert fragment in light and fragment in one
    assert "AS turns" in one and "AS turns" not in light
    assert "fairness.fair" in light
    for name in INPUT_COLUMNS:
        assert f"%({name})s" in light
