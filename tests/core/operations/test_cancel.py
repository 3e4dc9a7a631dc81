"""``queue.cancel``, the operator's side: a pending job ends ``cancelled`` (kept, listed, pruned
by ``cancelled_at``), a running one gets a cancel request its worker acts on, a finished one is
refused; and a cancel racing the job's completion leaves exactly one terminal state."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, text

import sqla_queue as sq
from sqla_queue.sql.notify import finished_channel
from sqla_queue.types import JobCancelled


class Cancellations:
    """Records the cancelled events a queue emits."""

    def __init__(self) -> None:
        self.events: list[JobCancelled] = []

    @sq.hookimpl
    def sqla_queue_job_cancelled(self, event):
        self.events.append(event)


@pytest.fixture
def heard():
    return Cancellations()


@pytest.fixture
def cq(ops_queue, heard):
    ops_queue.plugin_manager.register(heard)
    return ops_queue


def test_a_pending_job_becomes_cancelled_and_is_kept(cq, heard, count_jobs):
    job_id = cq.enqueue("send_email", {"to": "a@b.c"}, delay=3600)

    view = cq.cancel(job_id)

    assert (view.id, view.status, view.payload) == (job_id, sq.JobStatus.CANCELLED, {"to": "a@b.c"})
    assert view.cancelled_at is not None and view.cancel_requested_at is None
    assert cq.get_job(job_id) == view and count_jobs() == 1
    assert heard.events == [JobCancelled(job_id=job_id, queue="default", task="send_email", attempt=0,
                                            requested_while_running=False)]
    assert [job.id for job in cq.list_jobs(status="cancelled").jobs] == [job_id]
    assert cq.claim(worker_id="w") == []  # never claimed again
    assert cq.stats()["default"].cancelled == 1


def test_a_cancelled_job_frees_its_idempotency_key(cq):
    first = cq.enqueue("send_email", {}, idempotency_key="receipt-1")
    cq.cancel(first)
    assert cq.enqueue("send_email", {}, idempotency_key="receipt-1") != first


def test_a_running_job_gets_a_cancel_request_and_stays_with_its_worker(cq, heard, job_row):
    job_id = cq.enqueue("send_email", {})
    [job] = cq.claim(worker_id="w")

    first = cq.cancel(job_id)
    again = cq.cancel(job_id)  # a second request keeps the first one's time

    assert first.status is sq.JobStatus.RUNNING and first.cancel_requested_at is not None
    assert again.cancel_requested_at == first.cancel_requested_at and again.cancelled_at is None
    row = job_row(job_id)
    assert (row["status"], row["claim_token"], row["locked_by"]) == ("running", job.claim_token, "w")
    assert heard.events == []  # the worker reports the job's end, when it ends


@pytest.mark.parametrize("end", ["completed", "failed", "cancelled"])
def test_a_finished_job_is_refused_naming_its_state(cq, table_rows, end):
    job_id = cq.enqueue("send_email", {})
    if end == "cancelled":
        cq.cancel(job_id)
    else:
        [job] = cq.claim(worker_id="w")
        (cq.complete if end == "completed" else lambda i, t: cq.fail(i, t, error="x"))(job.id, job.claim_token)
    before = table_rows()
    with pytest.raises(sq.errors.JobStateError,
                       match=f"job {job_id} is {end}: only pending or running jobs can be cancelled"):
        cq.cancel(job_id)
    assert table_rows() == before


def test_an_unknown_job_is_invalid_input(cq, table_rows):
    cq.enqueue("send_email", {})
    before = table_rows()
    with pytest.raises(sq.InvalidInputError, match="job 999 does not exist"):
        cq.cancel(999)
    assert table_rows() == before


def test_cancelling_a_pending_job_wakes_whoever_waits_for_it(cq, engine):
    job_id = cq.enqueue("send_email", {})
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as listener:
        listener.exec_driver_sql(f'LISTEN "{finished_channel(cq.table)}"')
        with engine.begin() as conn:  # what Queue.wait does: only a watched job is announced
            assert conn.execute(cq.core.executor.statements.watch_job, {"job_id": job_id}).all()
        cq.cancel(job_id)
        driver = listener.connection.driver_connection
        notices = list(driver.notifies(timeout=10, stop_after=1))
    assert [n.payload for n in notices] == [str(job_id)]


def test_cancelled_jobs_are_pruned_by_cancelled_at_and_kept_otherwise(cq, run_sql, count_jobs):
    old, recent, done = (cq.enqueue("send_email", {"n": n}) for n in range(3))
    cq.cancel(old)
    cq.cancel(recent)
    [job] = cq.claim(worker_id="w")
    cq.complete(job.id, job.claim_token)
    run_sql("UPDATE sqla_queue_jobs SET cancelled_at = now() - interval '10 days' WHERE id = :id", id=old)
    run_sql("UPDATE sqla_queue_jobs SET completed_at = now() - interval '10 days' WHERE id = :id", id=done)

    result = cq.prune(cancelled_after=timedelta(days=7))

    assert (result.cancelled, result.completed, result.jobs) == (1, 0, 1)
    assert cq.get_job(old) is None and cq.get_job(recent).status is sq.JobStatus.CANCELLED
    assert cq.get_job(done).status is sq.JobStatus.COMPLETED  # its own retention, not given


ROUNDS = 40


def test_cancel_racing_completion_leaves_exactly_one_terminal_state(fresh_url, new_queue):
    """Each round: a claimed job, then cancel and complete released together. Whatever the
    order, the job ends completed or cancelled, and each side's report agrees with the end: a
    cancel that reported a request (or a cancel) means the job ended cancelled, a refused cancel
    means it completed."""
    engine = create_engine(fresh_url, pool_size=4)
    queue = new_queue(engine)
    seen: dict[str, int] = {}
    try:
        for _ in range(ROUNDS):
            job_id = queue.enqueue("send_email", {})
            [job] = queue.claim(worker_id="w")
            reports: dict[str, object] = {}
            barrier = threading.Barrier(2)

            def cancel() -> None:
                barrier.wait(timeout=30)
                try:
                    reports["cancel"] = queue.cancel(job_id)
                except sq.errors.JobStateError as exc:
                    reports["cancel"] = exc

            def complete() -> None:
                barrier.wait(timeout=30)
                reports["complete"] = queue.complete(job.id, job.claim_token)

            threads = [threading.Thread(target=cancel), threading.Thread(target=complete)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
            final = queue.get_job(job_id)
            with engine.connect() as conn:
                terminal_times = conn.execute(text(
                    "SELECT num_nonnulls(completed_at, failed_at, cancelled_at) FROM sqla_queue_jobs"
                    " WHERE id = :id"), {"id": job_id}).scalar_one()
            assert final.status in (sq.JobStatus.COMPLETED, sq.JobStatus.CANCELLED), final
            assert terminal_times == 1, final
            assert reports["complete"] is True  # the claim was the worker's either way
            cancel_report = reports["cancel"]
            if isinstance(cancel_report, sq.errors.JobStateError):
                assert final.status is sq.JobStatus.COMPLETED, (cancel_report, final)
                assert "is completed" in str(cancel_report) or "locked by another transaction" in str(cancel_report)
                seen["refused"] = seen.get("refused", 0) + 1
            else:
                assert final.status is sq.JobStatus.CANCELLED, (cancel_report, final)
                assert cancel_report.cancel_requested_at is not None
                seen["requested"] = seen.get("requested", 0) + 1
    finally:
        engine.dispose()
    assert sum(seen.values()) == ROUNDS
