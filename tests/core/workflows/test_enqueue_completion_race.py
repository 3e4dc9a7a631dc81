"""An enqueue naming a job that is finishing at that very moment.

The enqueue locks the dependency's row and inserts the edge; a completion whose statement
started before the enqueue committed waits on that row lock and, once it gets it, works from
its own (older) snapshot of the dependencies table: it never sees the new edge. The finishing
path notices that it settled fewer edges than the row's ``dependents`` says and settles again
in a fresh statement, so the new job is released (or cancelled) all the same, and the
recovery pass releases any waiting job whose dependencies all finished.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from sqlalchemy import text
from waiting import wait_until

import sqla_queue as sq


def _complete(queue: sq.Queue, job: sq.ClaimedJob) -> None:
    assert queue.complete(job.id, job.claim_token)


def _round(queue: sq.Queue, job: sq.ClaimedJob) -> None:
    results, _ = queue.complete_and_claim([job], worker_id="race", limit=0)
    assert results == {job.id: True}


def _complete_many(queue: sq.Queue, job: sq.ClaimedJob) -> None:
    assert queue.core.outcomes.complete_many([job], {}) == {job.id: True}


def _fail(queue: sq.Queue, job: sq.ClaimedJob) -> None:
    assert queue.fail(job.id, job.claim_token, error="boom")


def _finish_during_enqueue(queue: sq.Queue, make_engine, sql_scalar,
                           finish: Callable[[sq.Queue, sq.ClaimedJob], None], **options) -> int:
    """Enqueue a job depending on a running job inside an open transaction, finish the running
    job in a thread (its statement waits for the enqueue's lock), then commit the enqueue."""
    queue.enqueue("send_email", {})
    (job,) = queue.claim(worker_id="race")
    engine = make_engine()
    with engine.connect() as conn:
        dependent = queue.enqueue("send_email", {}, depends_on=[job.id], connection=conn, **options)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                finish(queue, job)
            except BaseException as error:  # noqa: BLE001 -- re-raised on the test's thread
                errors.append(error)

        thread = threading.Thread(target=run)
        thread.start()
        wait_until(lambda: not thread.is_alive() or sql_scalar(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE NOT l.granted"
            " AND l.locktype = 'transactionid' AND a.datname = current_database()") > 0,
            "the completion to wait for the enqueue's row lock")
        assert thread.is_alive(), errors
        conn.commit()
        thread.join(timeout=30)
    assert not thread.is_alive() and not errors, errors
    return dependent


@pytest.mark.parametrize("finish", [_complete, _round, _complete_many], ids=["complete", "round", "complete_many"])
def test_a_completion_racing_the_enqueue_releases_the_new_dependent(fresh_queue, make_engine, sql_scalar, finish):
    dependent = _finish_during_enqueue(fresh_queue, make_engine, sql_scalar, finish)
    row = sql_scalar("SELECT status || ':' || waiting_on FROM sqla_queue_jobs WHERE id = :id", id=dependent)
    assert row == "pending:0"


def test_a_failure_racing_the_enqueue_cancels_the_new_dependent(fresh_queue, make_engine, sql_scalar):
    dependent = _finish_during_enqueue(fresh_queue, make_engine, sql_scalar, _fail)
    job = fresh_queue.get_job(dependent)
    assert job.status is sq.JobStatus.CANCELLED
    assert job.last_error == "a dependency failed or was cancelled"


def test_a_failure_racing_the_enqueue_releases_a_dependent_that_runs_anyway(fresh_queue, make_engine, sql_scalar):
    dependent = _finish_during_enqueue(fresh_queue, make_engine, sql_scalar, _fail, on_dependency_failure="run")
    assert fresh_queue.get_job(dependent).status is sq.JobStatus.PENDING


def _finish_behind_the_settle(engine, job_id: int, status: str) -> None:
    """Finish `job_id` with a bare UPDATE that settles nothing: what a missed settle leaves."""
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE sqla_queue_jobs SET status = '{status}', {status}_at = now() WHERE id = :id"),
                     {"id": job_id})


def test_the_recovery_pass_releases_a_waiting_job_whose_dependencies_all_finished(queue, engine):
    first, second = queue.enqueue("send_email", {}), queue.enqueue("send_email", {})
    both = queue.enqueue("send_email", {}, depends_on=[first, second])
    _finish_behind_the_settle(engine, first, "completed")
    queue.recover_expired()
    assert queue.get_job(both).status is sq.JobStatus.WAITING  # `second` is still pending
    _finish_behind_the_settle(engine, second, "completed")
    queue.recover_expired()
    job = queue.get_job(both)
    assert job.status is sq.JobStatus.PENDING
    with engine.connect() as conn:
        assert conn.execute(text("SELECT waiting_on FROM sqla_queue_jobs WHERE id = :id"), {"id": both}).scalar() == 0


def test_the_recovery_pass_cancels_the_dependents_of_a_failed_job_and_theirs(queue, engine):
    first = queue.enqueue("send_email", {})
    child, grandchild, anyway = queue.enqueue_many([
        {"task": "send_email", "payload": {}, "depends_on": [first]},
        {"task": "send_email", "payload": {}, "depends_on": [sq.Earlier(0)]},
        {"task": "send_email", "payload": {}, "depends_on": [first], "on_dependency_failure": "run"},
    ])
    _finish_behind_the_settle(engine, first, "failed")
    queue.recover_expired()
    assert [queue.get_job(i).status for i in (child, grandchild, anyway)] == [
        sq.JobStatus.CANCELLED, sq.JobStatus.CANCELLED, sq.JobStatus.PENDING]
    assert queue.get_job(child).last_error == "a dependency failed or was cancelled"
