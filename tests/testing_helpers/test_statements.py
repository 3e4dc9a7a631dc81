"""The statements behind the testing helpers (time travel, claim by id, the pending reads),
compiled and run against real PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sqlalchemy import select
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

import sqla_queue as sq
from sqla_queue.sql import jobs as job_sql
from sqla_queue.sql.claim import claim_job_by_id
from sqla_queue.sql.stats import database_now
from sqla_queue.sql.time_travel import advance_due_jobs

TABLE = sq.Job.__table__


class _Compiler(PGDialect_psycopg.statement_compiler):
    """Renders post-compile values (the literal statuses) without the bound values."""

    def construct_params(self, *args, **kwargs):
        kwargs["_check"] = False
        return super().construct_params(*args, **kwargs)


class _Dialect(PGDialect_psycopg):
    statement_compiler = _Compiler


def rendered(statement) -> str:
    compiled = statement.compile(dialect=_Dialect(), compile_kwargs={"render_postcompile": True})
    return " ".join(str(compiled).split())


def test_time_travel_moves_only_pending_jobs_due_within_the_window():
    text = rendered(advance_due_jobs(TABLE))
    assert "sqla_queue_jobs.status = 'pending'" in text
    assert "sqla_queue_jobs.queue_name = ANY (%(queues)s::TEXT[])" in text
    assert "sqla_queue_jobs.run_at > %(since)s::TIMESTAMP WITH TIME ZONE" in text
    assert "sqla_queue_jobs.run_at <= %(now)s::TIMESTAMP WITH TIME ZONE + %(advance)s::INTERVAL" in text
    assert "SET run_at=(sqla_queue_jobs.run_at - %(advance)s::INTERVAL)" in text


def test_claim_by_id_locks_its_one_pending_row_and_marks_it_as_the_claim_does():
    text = rendered(claim_job_by_id(TABLE))
    assert "WHERE sqla_queue_jobs.id = %(job_id)s::BIGINT AND sqla_queue_jobs.status = 'pending' " \
           "FOR UPDATE SKIP LOCKED" in text
    assert "attempts=coalesce(%(attempt)s::INTEGER, sqla_queue_jobs.attempts + " in text
    claim = rendered(sq.sql.claim_jobs(TABLE))
    assert claim[claim.index("RETURNING"):] == text[text.index("RETURNING"):]  # one ClaimedJob shape


def test_pending_reads_use_literal_status_and_bound_values():
    text = rendered(job_sql.pending_jobs(TABLE, by_task=True, by_queue=True, by_payload=True))
    assert "sqla_queue_jobs.status = 'pending'" in text
    assert "sqla_queue_jobs.payload @> %(payload)s::JSONB" in text
    assert "ORDER BY sqla_queue_jobs.id LIMIT %(limit)s::INTEGER" in text
    assert "ORDER BY sqla_queue_jobs.priority DESC, sqla_queue_jobs.run_at, sqla_queue_jobs.id" in \
        rendered(job_sql.due_jobs(TABLE))


def test_time_travel_against_postgresql(queue, own_engine):
    """Every job within the window moves once and by the same amount: the order of due times
    is kept; a job scheduled after the move moves at the next one."""
    due = queue.enqueue("resize", {"n": 0})
    soon = [queue.enqueue("resize", {"n": n}, delay=timedelta(minutes=n)) for n in (10, 20)]
    late = queue.enqueue("resize", {"n": 3}, delay=timedelta(hours=2))
    other_queue = queue.enqueue("resize", {"n": 4}, delay=timedelta(minutes=5), queue="elsewhere")
    before = _run_at(own_engine)
    hour = timedelta(hours=1)

    first = _advance(own_engine, since=datetime(1, 1, 1, tzinfo=timezone.utc), advance=hour)
    assert sorted(first.moved) == [due, *soon]
    after = _run_at(own_engine)
    assert {i: after[i] - before[i] for i in [due, *soon]} == dict.fromkeys([due, *soon], -hour)
    assert after[late] == before[late] and after[other_queue] == before[other_queue]

    retried = queue.enqueue("resize", {"n": 5}, delay=timedelta(minutes=1))  # after the first move
    second = _advance(own_engine, since=first.now, advance=hour)
    assert second.moved == [retried]  # the moved ones are not moved twice


class _Moved:
    def __init__(self, moved, now):
        self.moved, self.now = moved, now


def _advance(engine, *, since, advance):
    with engine.begin() as conn:
        now = conn.execute(database_now()).scalar_one()
        moved = conn.execute(advance_due_jobs(TABLE), {"queues": ["images"], "advance": advance,
                                                       "since": since, "now": now}).scalars().all()
    return _Moved(moved, now)


def _run_at(engine):
    with engine.connect() as conn:
        return dict(conn.execute(select(TABLE.c.id, TABLE.c.run_at)).all())
