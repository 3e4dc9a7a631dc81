"""The worker's round, `Queue.complete_and_claim`: one statement completes the finished jobs
(each under its own token) and claims the next ones.

Run two ways: on a plain Queue (SQLAlchemy execution inside our own READ COMMITTED
transaction) and on a worker's bound queue (the statement compiled once and run on the driver
connection in autocommit, sessions pinned to READ COMMITTED).
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from sqlalchemy import create_engine, event, text

import sqla_queue as sq


@pytest.fixture(params=["queue", "worker"])
def round_queue(request, recorded_queue):
    if request.param == "queue":
        yield recorded_queue
        return
    worker = recorded_queue.worker(concurrency=2)
    capabilities = worker.core.executor.capabilities
    assert capabilities.autocommit_single_statements and capabilities.driver_fast_path
    yield recorded_queue.on_engine(worker.engine, call_timeout=worker.config.effective_call_timeout)
    worker.engine.dispose()


def test_completes_the_finished_and_claims_up_to_the_limit_in_one_commit(round_queue, recorder, job_row):
    ids = round_queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(5)])
    first = round_queue.claim(worker_id="w", limit=2)

    results, claimed = round_queue.complete_and_claim(first, worker_id="w", limit=2)

    assert results == {job.id: True for job in first}
    assert [job.id for job in claimed] == ids[2:4]
    assert [job.payload for job in claimed] == [{"n": 2}, {"n": 3}]
    assert len({job.claim_token for job in claimed}) == 1
    assert claimed[0].claim_token not in {job.claim_token for job in first}
    assert [job_row(i)["status"] for i in ids] == ["completed", "completed", "running", "running", "pending"]
    assert [e.job_id for e in recorder.of("completed")] == ids[:2]
    assert all(e.duration is not None for e in recorder.of("completed"))
    assert [e.job_id for e in recorder.of("claimed")][-2:] == ids[2:4]


def test_a_finished_job_under_a_stale_token_is_reported_lost_and_left_alone(
    round_queue, recorder, job_row, expire_lease
):
    job_id = round_queue.enqueue("send_email", {})
    [stale] = round_queue.claim(worker_id="w1")
    expire_lease(job_id)
    round_queue.recover_expired(lease=sq.DEFAULT_LEASE)
    [current] = round_queue.claim(worker_id="w2")
    before = job_row(job_id)

    results, claimed = round_queue.complete_and_claim([stale], worker_id="w1", limit=1)

    assert results == {job_id: False} and claimed == []
    assert job_row(job_id) == before
    assert [e.job_id for e in recorder.of("lost_claim")] == [job_id]
    assert round_queue.complete(current.id, current.claim_token) is True


def test_a_replayed_round_reports_success_and_fires_no_second_event(round_queue, recorder):
    round_queue.enqueue("send_email", {})
    jobs = round_queue.claim(worker_id="w")
    round_queue.complete_and_claim(jobs, worker_id="w", limit=0)

    results, claimed = round_queue.complete_and_claim(jobs, worker_id="w", limit=0)

    assert results == {jobs[0].id: True} and claimed == []
    assert len(recorder.of("completed")) == 1


def test_limit_zero_only_completes_and_an_empty_round_is_an_empty_claim(round_queue, recorder, job_row):
    first, second = round_queue.enqueue_many([{"task": "send_email", "payload": {}}] * 2)
    jobs = round_queue.claim(worker_id="w", limit=1)

    assert round_queue.complete_and_claim(jobs, worker_id="w", limit=0) == ({first: True}, [])
    assert job_row(second)["status"] == "pending"
    empty_before = len(recorder.of("empty_claim"))
    assert round_queue.complete_and_claim([], queue="images", worker_id="w", limit=3) == ({}, [])
    assert len(recorder.of("empty_claim")) == empty_before + 1


def test_complete_many_completes_each_under_its_token_and_reports_the_lost_one(
    round_queue, recorder, job_row, expire_lease
):
    """The worker's flush (completions without a claim) and `Queue.complete_many`: on a
    worker's engine it runs the compiled statement on the driver connection, SQLAlchemy's
    execution never sees it."""
    ids = round_queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(3)])
    jobs = round_queue.claim(worker_id="w", limit=3)
    expire_lease(ids[2])
    round_queue.recover_expired(lease=sq.DEFAULT_LEASE)  # the third job's claim is gone
    executed: list[str] = []

    def record(conn, cursor, sql, *rest):
        executed.append(sql)

    engine = round_queue.engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        results = round_queue.complete_many(jobs, results={ids[0]: {"ok": 1}})
    finally:
        event.remove(engine, "before_cursor_execute", record)

    assert results == {ids[0]: True, ids[1]: True, ids[2]: False}
    assert [job_row(i)["status"] for i in ids] == ["completed", "completed", "pending"]
    assert job_row(ids[0])["result"] == {"ok": 1}
    assert sorted(e.job_id for e in recorder.of("completed")) == ids[:2]
    assert [e.job_id for e in recorder.of("lost_claim")] == [ids[2]]
    batch = [sql for sql in executed if "job_ids" in sql]  # not the lost job's own `complete`
    on_driver = round_queue.core.executor.capabilities.driver_fast_path
    assert len(batch) == (0 if on_driver else 1), executed


@pytest.mark.parametrize("limit", [-1, True, 1.5, "2"])
def test_a_bad_limit_is_refused_before_anything_is_written(round_queue, table_rows, limit):
    round_queue.enqueue("send_email", {})
    jobs = round_queue.claim(worker_id="w")
    before = table_rows()
    with pytest.raises(sq.InvalidInputError, match="limit"):
        round_queue.complete_and_claim(jobs, worker_id="w", limit=limit)
    assert table_rows() == before


def test_worker_sessions_run_read_committed_whatever_the_database_default(create_database):
    """Autocommit statements take the session's default isolation; a database defaulting to
    SERIALIZABLE would turn concurrent claims into serialization failures."""
    url = create_database()
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        name = conn.execute(text("SELECT current_database()")).scalar_one()
        conn.execute(text(f'ALTER DATABASE "{name}" SET default_transaction_isolation = \'serializable\''))
    admin.dispose()
    queue = sq.Queue(url, load_entrypoints=False)
    worker = queue.worker(concurrency=1)
    try:
        with queue.engine.connect() as conn:  # the host's own sessions keep the database default
            assert conn.execute(text("SHOW default_transaction_isolation")).scalar_one() == "serializable"
        with worker.core.executor.single_statement() as conn:
            assert conn.execute(text("SHOW transaction_isolation")).scalar_one() == "read committed"
    finally:
        worker.engine.dispose()
        queue.engine.dispose()


def test_a_connection_terminated_while_pooled_is_replaced_before_the_round(recorded_queue, engine):
    """The server says so on the socket when it ends a backend; the worker's pool sees that at
    checkout (no round trip) and connects again, so the round itself does not fail."""
    worker = recorded_queue.worker(concurrency=1)
    bound = recorded_queue.on_engine(worker.engine, call_timeout=worker.config.effective_call_timeout)
    try:
        recorded_queue.enqueue("send_email", {"secret": "hunter2"})
        with bound.core.executor.single_statement() as conn:  # the pool's only connection, reused next
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": pid})

        _, claimed = bound.complete_and_claim([], worker_id="w", limit=1)
        assert [job.payload for job in claimed] == [{"secret": "hunter2"}]
        with bound.core.executor.single_statement() as conn:
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar_one() != pid
    finally:
        worker.engine.dispose()


def test_a_connection_terminated_mid_call_raises_database_error_and_the_next_round_reconnects(
    recorded_queue, engine
):
    worker = recorded_queue.worker(concurrency=1)
    bound = recorded_queue.on_engine(worker.engine, call_timeout=worker.config.effective_call_timeout)
    params = {"queues": ["default"], "tasks": None, "worker_id": "w", "limit": 1, "token": "t",
              "lease": sq.DEFAULT_LEASE,
              "job_ids": [], "tokens": [], "results": []}
    try:
        recorded_queue.enqueue("send_email", {"secret": "hunter2"})
        with pytest.raises(sq.DatabaseError) as failed:
            with bound.core.executor.single_statement() as conn:
                pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
                with engine.connect() as other:
                    other.execute(text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": pid})
                bound.core.executor.run_round(conn, params)  # the round's driver path, mid-checkout
        assert failed.value.connection_invalidated
        assert "hunter2" not in str(failed.value)
        _, claimed = bound.complete_and_claim([], worker_id="w", limit=1)
        assert [job.payload for job in claimed] == [{"secret": "hunter2"}]
    finally:
        worker.engine.dispose()


def test_the_prepared_round_settles_on_a_generic_plan(recorded_queue, run_sql):
    """PostgreSQL re-plans a prepared statement on every execution while its generic plan looks
    worse than the custom ones; a round that cost a full plan each time halved the drain rate.
    Once psycopg has prepared it (after 5 executions), later rounds must reuse one plan."""
    worker = recorded_queue.worker(concurrency=1)
    bound = recorded_queue.on_engine(worker.engine, call_timeout=worker.config.effective_call_timeout)
    try:
        # A backlog the planner knows about: the bad generic plan only looks cheap on a big table.
        recorded_queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(20_000)])
        run_sql("ANALYZE sqla_queue_jobs")
        finished: list = []
        for _ in range(25):
            _, finished = bound.complete_and_claim(finished, worker_id="w", limit=2)
        with bound.core.executor.round_connection() as conn:  # the session the rounds ran on (kept between rounds)
            [(generic, custom)] = conn.execute(text(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement LIKE 'WITH RECURSIVE completed_now AS%'"
            )).all()
        assert generic >= 5, (generic, custom)
    finally:
        worker.engine.dispose()


def test_a_claim_from_a_position_skips_what_lies_before_it_in_claim_order(round_queue):
    ids = round_queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(6)])
    first = round_queue.claim(worker_id="w", limit=2)
    position = sq.worker.claim_position(first)
    assert position == (0, first[0].run_at, ids[0])

    _, later = round_queue.complete_and_claim([], worker_id="w", limit=2,
                                              from_position=(0, first[1].run_at, ids[4]))
    _, from_position = round_queue.complete_and_claim([], worker_id="w", limit=2, from_position=position)
    _, from_start = round_queue.complete_and_claim([], worker_id="w", limit=2)

    assert [job.id for job in later] == ids[4:6]
    assert [job.id for job in from_position] == ids[2:4]
    assert from_start == []


@pytest.mark.parametrize("position", [(0, None, 1), (0, "2026-01-01", 1), (0, datetime(2026, 1, 1), 1),
                                      (0, datetime(2026, 1, 1, tzinfo=timezone.utc), "1"), [0, 1, 2],
                                      (datetime(2026, 1, 1, tzinfo=timezone.utc), 1),
                                      (True, datetime(2026, 1, 1, tzinfo=timezone.utc), 1)])
def test_a_bad_claim_position_is_refused_before_anything_is_written(round_queue, table_rows, position):
    round_queue.enqueue("send_email", {})
    before = table_rows()
    with pytest.raises(sq.InvalidInputError, match="from_position"):
        round_queue.complete_and_claim([], worker_id="w", limit=1, from_position=position)
    assert table_rows() == before
