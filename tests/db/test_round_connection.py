"""The worker's round connection (`Executor.round_connection`): on a worker engine one
connection serves round after round (no checkout and check-in per round); an error in a round
discards it and the next round connects afresh; one the server terminated while it rested is
replaced before use, without a failed round; a stopped worker gives it back. On any other
engine a round gets a connection of its own, as `single_statement` does."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import event, func, select, text

import sqla_queue as sq
from sqla_queue.db.engine import has_pending_input
from sqla_queue.db.worker_engine import worker_engine
from sqla_queue.errors import DatabaseError

from waiting import wait_until

BACKEND = select(func.pg_backend_pid())


@pytest.fixture
def on_worker_engine(engine):
    ours = worker_engine(engine, pool_size=2, call_timeout=5.0)
    executor = sq.Queue(engine, load_entrypoints=False).on_engine(ours, call_timeout=5.0).core.executor
    yield executor, ours
    executor.close_round_connection()
    ours.dispose()


def _round_backend(executor) -> int:
    with executor.round_connection() as conn:
        return conn.execute(BACKEND).scalar_one()


def test_rounds_share_one_connection_until_it_is_closed(on_worker_engine):
    executor, ours = on_worker_engine
    first = _round_backend(executor)

    assert [_round_backend(executor) for _ in range(5)] == [first] * 5
    assert ours.pool.checkedout() == 1  # kept between rounds

    executor.close_round_connection()
    assert ours.pool.checkedout() == 0


def test_a_round_runs_in_autocommit_at_read_committed(on_worker_engine):
    executor, _ = on_worker_engine
    with executor.round_connection() as conn:
        first = conn.execute(select(func.txid_current())).scalar_one()
        second = conn.execute(select(func.txid_current())).scalar_one()
        level = conn.execute(select(func.current_setting("transaction_isolation"))).scalar_one()
    assert first != second and level == "read committed"
    with executor.round_connection() as conn:  # nothing left open by the last round
        assert conn.execute(select(func.txid_current())).scalar_one() not in (first, second)


def test_an_error_in_a_round_discards_the_connection_and_the_next_round_connects_afresh(on_worker_engine):
    executor, ours = on_worker_engine
    first = _round_backend(executor)

    with pytest.raises(DatabaseError):
        with executor.round_connection() as conn:
            conn.execute(text("SELECT 1 / 0"))

    assert ours.pool.checkedout() == 0
    assert _round_backend(executor) != first


def test_a_connection_the_server_terminated_between_rounds_is_replaced_without_a_failed_round(
    on_worker_engine, engine
):
    executor, _ = on_worker_engine
    with executor.round_connection() as conn:
        first = conn.execute(BACKEND).scalar_one()
        driver = conn.connection.driver_connection
    with engine.connect() as other:
        other.execute(select(func.pg_terminate_backend(first)))
    wait_until(lambda: has_pending_input(driver), "the server's goodbye to reach the kept connection")

    assert _round_backend(executor) != first


def test_an_application_engine_gets_a_connection_per_round(engine):
    executor = sq.Queue(engine, load_entrypoints=False).core.executor
    before = engine.pool.checkedout()
    with executor.round_connection() as conn:
        conn.execute(BACKEND)
        assert engine.pool.checkedout() == before + 1
    assert engine.pool.checkedout() == before  # given back at once: nothing kept


def test_a_stopped_worker_gives_its_round_connection_back(queue):
    queue.enqueue_many([{"task": "send_email", "payload": {}}] * 20)
    worker = queue.worker(concurrency=2, poll_interval=0.05, lease=timedelta(seconds=6))
    moves = {"checkout": 0, "checkin": 0}
    for name in moves:
        event.listen(worker.engine, name, lambda *args, _name=name: moves.__setitem__(_name, moves[_name] + 1))

    assert worker.run(until_empty=True).completed == 20
    assert moves["checkout"] == moves["checkin"] > 0
