"""Enqueue inside the caller's transaction, and the idempotency-key dedupe window."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

import sqla_queue as sq

# -- the caller's transaction -------------------------------------------------------------


def test_job_enqueued_in_a_session_exists_once_the_session_commits(committed_queue, engine, count_jobs):
    with Session(engine) as session:
        job_id = committed_queue.enqueue("send_email", {"to": "a@example.com"}, session=session)
        assert session.in_transaction()
        assert count_jobs() == 0  # another connection cannot see it: we did not commit
        session.commit()

    assert count_jobs() == 1
    assert committed_queue.get_job(job_id).status is sq.JobStatus.PENDING


def test_job_enqueued_in_a_session_vanishes_when_the_session_rolls_back(committed_queue, engine, count_jobs):
    with Session(engine) as session:
        committed_queue.enqueue("send_email", {}, session=session)
        session.rollback()

    assert count_jobs() == 0


def test_job_and_domain_row_commit_or_roll_back_together(committed_queue, engine, count_jobs, run_sql):
    run_sql("CREATE TABLE IF NOT EXISTS test_orders (id serial PRIMARY KEY, total int)")
    run_sql("TRUNCATE test_orders")

    def place_order(commit: bool) -> None:
        with Session(engine) as session:
            session.execute(text("INSERT INTO test_orders (total) VALUES (42)"))
            committed_queue.enqueue("send_email", {"receipt": True}, session=session)
            session.commit() if commit else session.rollback()

    place_order(commit=False)
    place_order(commit=True)

    with engine.connect() as conn:
        orders = conn.execute(text("SELECT count(*) FROM test_orders")).scalar_one()
    assert (orders, count_jobs()) == (1, 1)


def test_job_enqueued_on_a_connection_exists_once_its_transaction_commits(committed_queue, engine, count_jobs):
    with engine.connect() as conn:
        conn.begin()
        committed_queue.enqueue("send_email", {}, connection=conn)
        committed_queue.enqueue_many([{"task": "send_email", "payload": {}}], connection=conn)
        assert conn.in_transaction()
        assert count_jobs() == 0
        conn.commit()

    assert count_jobs() == 2


def test_job_enqueued_on_a_connection_vanishes_when_it_rolls_back(committed_queue, engine, count_jobs):
    with engine.connect() as conn:
        conn.begin()
        committed_queue.enqueue("send_email", {}, connection=conn)
        conn.rollback()

    assert count_jobs() == 0


def test_enqueue_without_a_transaction_commits_on_its_own(committed_queue, count_jobs):
    committed_queue.enqueue("send_email", {})
    assert count_jobs() == 1


def test_enqueue_many_returns_ids_in_input_order(queue, connection, job_row):
    jobs = [{"task": "send_email", "payload": {"n": n}} for n in range(5)]
    jobs[2]["idempotency_key"] = "k-2"
    jobs[3]["queue"] = "emails"

    ids = queue.enqueue_many(jobs, connection=connection)

    assert len(set(ids)) == 5
    assert [job_row(i)["payload"] for i in ids] == [{"n": n} for n in range(5)]
    assert job_row(ids[3])["queue_name"] == "emails"
    assert job_row(ids[2])["idempotency_key"] == "k-2"


def test_enqueue_many_of_nothing_writes_nothing(queue, connection, count_jobs):
    assert queue.enqueue_many([], connection=connection) == []
    assert queue.enqueue_many([]) == []
    assert count_jobs() == 0


def test_enqueue_options_are_stored(queue, session, job_row):
    job_id = queue.enqueue(
        "resize", {"w": 10}, queue="thumbnails", max_attempts=7, idempotency_key="img-1", delay=60,
        session=session,
    )
    session.commit()  # a SAVEPOINT here: the test's outer transaction still rolls it back
    row = job_row(job_id)
    assert (row["task"], row["queue_name"], row["max_attempts"], row["idempotency_key"]) == (
        "resize", "thumbnails", 7, "img-1",
    )
    # the delay counts from the inserting transaction's now(), the database's clock
    assert row["run_at"] - row["created_at"] == timedelta(seconds=60)


# -- the dedupe window ------------------------------------------------------------------------


def test_same_key_while_active_returns_the_existing_job(committed_queue, count_jobs):
    first = committed_queue.enqueue("send_email", {"v": 1}, idempotency_key="welcome:42")
    second = committed_queue.enqueue("send_email", {"v": 2}, idempotency_key="welcome:42")
    [job] = committed_queue.claim(worker_id="w")
    while_running = committed_queue.enqueue("send_email", {"v": 3}, idempotency_key="welcome:42")

    assert first == second == while_running == job.id
    assert count_jobs() == 1
    assert committed_queue.get_job(first).payload == {"v": 1}


@pytest.mark.parametrize(
    "finish",
    [
        pytest.param(lambda q, j: q.complete(j.id, j.claim_token), id="completed"),
        pytest.param(lambda q, j: q.fail(j.id, j.claim_token, error="x"), id="failed"),
        pytest.param(
            lambda q, j: q.retry(j.id, j.claim_token, error="x", delay=0), id="retried-is-active"
        ),
    ],
)
def test_a_finished_job_releases_its_key_and_an_active_one_keeps_it(committed_queue, count_jobs, finish):
    first = committed_queue.enqueue("resize", {}, idempotency_key="thumb:7", max_attempts=1)
    [job] = committed_queue.claim("images", worker_id="w")
    outcome = finish(committed_queue, job)
    finished = committed_queue.get_job(first).status in (sq.JobStatus.COMPLETED, sq.JobStatus.FAILED)

    again = committed_queue.enqueue("resize", {}, idempotency_key="thumb:7")

    assert outcome
    assert finished  # max_attempts=1: even a retry ends the job
    assert again != first
    assert count_jobs() == 2


def test_retried_job_with_attempts_left_keeps_its_key(committed_queue, count_jobs):
    first = committed_queue.enqueue("send_email", {}, idempotency_key="k")
    [job] = committed_queue.claim(worker_id="w")
    committed_queue.retry(job.id, job.claim_token, error="x", delay=3600)

    assert committed_queue.enqueue("send_email", {}, idempotency_key="k") == first
    assert count_jobs() == 1


def test_repeated_key_within_one_batch_maps_to_one_job(queue, connection, count_jobs):
    ids = queue.enqueue_many(
        [
            {"task": "send_email", "payload": {"n": 0}, "idempotency_key": "same"},
            {"task": "send_email", "payload": {"n": 1}},
            {"task": "send_email", "payload": {"n": 2}, "idempotency_key": "same"},
        ],
        connection=connection,
    )
    assert ids[0] == ids[2] != ids[1]
    assert count_jobs() == 2


def _wait_until_blocked(engine, waiter_pid: int, holder_pid: int) -> None:
    """Poll (no sleep) until PostgreSQL reports `waiter_pid` blocked by `holder_pid`."""
    with engine.connect() as conn:
        for _ in range(100_000):
            blockers = conn.execute(
                text("SELECT pg_blocking_pids(:pid)"), {"pid": waiter_pid}
            ).scalar_one()
            if holder_pid in blockers:
                return
    raise AssertionError("the second enqueue never waited on the key holder")


@pytest.mark.parametrize("holder_commits", [True, False], ids=["holder-commits", "holder-rolls-back"])
def test_enqueue_waits_for_an_uncommitted_key_holder(committed_queue, engine, count_jobs, holder_commits):
    waiter_ready = threading.Event()
    result: dict[str, object] = {}

    def second_enqueue() -> None:
        try:
            with engine.connect() as conn:
                result["pid"] = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
                conn.rollback()
                waiter_ready.set()
                with conn.begin():
                    result["id"] = committed_queue.enqueue("send_email", {"who": "second"},
                                                 idempotency_key="order:1", connection=conn)
        except BaseException as exc:  # pragma: no cover - reported below
            result["error"] = exc
            waiter_ready.set()

    with engine.connect() as holder:
        holder_pid = holder.execute(text("SELECT pg_backend_pid()")).scalar_one()
        holder.rollback()
        holder.begin()
        holder_id = committed_queue.enqueue("send_email", {"who": "first"},
                                  idempotency_key="order:1", connection=holder)
        thread = threading.Thread(target=second_enqueue)
        thread.start()
        assert waiter_ready.wait(timeout=30)
        assert "error" not in result
        _wait_until_blocked(engine, result["pid"], holder_pid)
        holder.commit() if holder_commits else holder.rollback()
    thread.join(timeout=60)

    assert not thread.is_alive()
    assert "error" not in result, result.get("error")
    assert count_jobs() == 1
    if holder_commits:
        assert result["id"] == holder_id
    else:
        assert result["id"] != holder_id
        assert committed_queue.get_job(result["id"]).payload == {"who": "second"}
