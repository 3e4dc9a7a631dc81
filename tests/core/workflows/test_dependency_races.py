"""Two dependencies of one job finishing at the same moment, in two transactions: the second
waits for the first on the dependent's row and subtracts from the count the first left, so the
dependent is released exactly once and never left waiting (READ COMMITTED, as the library runs)."""

from __future__ import annotations

import threading

import sqla_queue as sq
from waiting import wait_until


def _complete(conn, queue: sq.Queue, job: sq.ClaimedJob) -> None:
    conn.execute(queue.core.statements.complete, {"job_id": job.id, "token": job.claim_token, "result": None}).all()


def test_two_dependencies_completing_at_once_release_the_dependent(fresh_queue, make_engine, sql_scalar):
    queue = fresh_queue
    a, b, c = queue.enqueue_many([
        {"task": "send_email", "payload": {}},
        {"task": "send_email", "payload": {}},
        {"task": "send_email", "payload": {}, "depends_on": [sq.Earlier(0), sq.Earlier(1)]},
    ])
    first, second = sorted(queue.claim(worker_id="race", limit=2), key=lambda job: job.id)
    engine = make_engine()
    with engine.connect() as one, engine.connect() as two:
        _complete(one, queue, first)  # holds the dependent's row lock until it commits
        pid = two.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        done = threading.Event()

        def complete_second() -> None:
            _complete(two, queue, second)
            two.commit()
            done.set()

        thread = threading.Thread(target=complete_second)
        thread.start()
        wait_until(lambda: sql_scalar("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = :pid",
                                      pid=pid), "the second completion to wait for the dependent's row")
        assert not done.is_set()
        one.commit()
        thread.join(timeout=30)
    assert done.is_set()
    assert sql_scalar("SELECT status || ':' || waiting_on FROM sqla_queue_jobs WHERE id = :id", id=c) == "pending:0"
    assert [queue.get_job(i).status.value for i in (a, b)] == ["completed", "completed"]
