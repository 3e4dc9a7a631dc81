"""The schedule statements as PostgreSQL receives them: the shape exactly-once rests on."""

from __future__ import annotations

from sqlalchemy.dialects import postgresql

from sqla_queue.models import Job
from sqla_queue.sql import schedules


def sql(statement) -> str:
    return " ".join(str(statement.compile(dialect=postgresql.dialect())).split())


def test_advance_moves_the_tick_only_forward_and_returns_the_row_only_then():
    text = sql(schedules.advance_schedule(Job.__table__))
    assert text.startswith("INSERT INTO sqla_queue_jobs_schedules (name, last_tick) VALUES (%(name)s")
    assert "ON CONFLICT (name) DO UPDATE SET last_tick = excluded.last_tick, updated_at = now()" in text
    assert text.endswith("WHERE sqla_queue_jobs_schedules.last_tick < excluded.last_tick "
                         "RETURNING sqla_queue_jobs_schedules.last_tick")


def test_the_backfill_read_locks_the_row():
    text = sql(schedules.last_tick_locked(Job.__table__))
    assert text.startswith("SELECT sqla_queue_jobs_schedules.last_tick FROM sqla_queue_jobs_schedules "
                           "WHERE sqla_queue_jobs_schedules.name = %(name)s")
    assert text.endswith(" FOR UPDATE")


def test_the_listing_reads_the_named_rows_by_key():
    text = sql(schedules.last_ticks(Job.__table__))
    assert "WHERE sqla_queue_jobs_schedules.name = ANY (%(names)s" in text
