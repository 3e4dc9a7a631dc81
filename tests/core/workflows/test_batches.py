"""Batches (`Queue.batch`): a callback job that runs exactly once, when every job of the batch
is terminal, reading ``ctx.batch``; `Queue.batch_status`; bad input refused, writing nothing."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

import sqla_queue as sq


@pytest.fixture
def batch_queue(queue):
    calls: list[sq.BatchStatus] = []

    @queue.task(name="work")
    def work(payload, ctx):
        if payload.get("fail"):
            raise sq.NonRetryableError("no")
        return payload["n"]

    @queue.task(name="report")
    def report(payload, ctx):
        calls.append(ctx.batch)
        return {"seen": payload["tag"]}

    queue.calls = calls
    return queue


def _count(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM sqla_queue_jobs")).scalar_one()


def test_the_callback_runs_once_when_every_job_completed_with_the_counts(batch_queue):
    queue = batch_queue
    batch_id = queue.batch([{"task": "work", "payload": {"n": n}} for n in range(5)],
                           on_complete=("report", {"tag": "x"}))
    status = queue.batch_status(batch_id)
    assert (status.batch_id, status.total, dict(status.counts)) == (batch_id, 5, {"pending": 5})
    assert status.callback is sq.JobStatus.WAITING and not status.finished
    queue.worker(queues=["default"]).run(until_empty=True)
    [seen] = queue.calls
    assert (seen.batch_id, seen.total, dict(seen.counts), seen.finished) == (batch_id, 5, {"completed": 5}, True)
    assert seen.callback is sq.JobStatus.RUNNING
    done = queue.batch_status(batch_id)
    assert done.callback is sq.JobStatus.COMPLETED and done.finished
    assert queue.get_job(batch_id).task == "report"


def test_a_batch_with_failures_and_cancels_still_calls_back_once(batch_queue):
    queue = batch_queue
    batch_id = queue.batch([{"task": "work", "payload": {"n": 1}}, {"task": "work", "payload": {"fail": True}},
                            {"task": "work", "payload": {"n": 3}}], on_complete=("report", {"tag": "y"}))
    first = batch_id - 3
    queue.cancel(first + 2)
    queue.worker(queues=["default"]).run(until_empty=True)
    [seen] = queue.calls
    assert dict(seen.counts) == {"completed": 1, "failed": 1, "cancelled": 1}
    assert queue.get_job(batch_id).status is sq.JobStatus.COMPLETED


def test_batch_in_the_callers_transaction_commits_with_it(batch_queue, engine):
    queue = batch_queue
    with engine.connect() as conn:
        batch_id = queue.batch([{"task": "work", "payload": {"n": 1}}], on_complete=("report", {"tag": "z"}),
                               connection=conn)
        conn.rollback()
    assert _count(engine) == 0
    with pytest.raises(sq.InvalidInputError, match=f"batch_id {batch_id} is not a batch"):
        queue.batch_status(batch_id)


def test_the_async_face_enqueues_the_same_batch_in_the_callers_session(batch_queue, engine):
    async def main() -> int:
        url = make_url(engine.url).set(drivername="postgresql+psycopg_async").render_as_string(hide_password=False)
        async_engine = create_async_engine(url)
        try:
            async with AsyncSession(async_engine) as session, session.begin():
                return await batch_queue.batch_async([{"task": "work", "payload": {"n": 1}}] * 3,
                                                     on_complete=("report", {"tag": "a"}), session=session)
        finally:
            await async_engine.dispose()

    batch_id = asyncio.run(main())
    status = batch_queue.batch_status(batch_id)
    assert (status.total, dict(status.counts), status.callback) == (3, {"pending": 3}, sq.JobStatus.WAITING)


@pytest.mark.parametrize("jobs, on_complete, message", [
    ([], ("report", {}), "a batch needs at least one job"),
    ({"task": "work", "payload": {}}, ("report", {}), "jobs must be a list of job mappings, got dict"),
    ([{"task": "work", "payload": {"n": 1}}], "report", "on_complete must be a .task, payload. pair, got str"),
    ([{"task": "work", "payload": {"n": 1}}], ("report", {}, 1), "on_complete must be a .task, payload. pair"),
    ([{"task": "work", "payload": {"n": 1}}], ("nope", {}), "nope"),
    ([{"task": "work", "payload": {"n": 1}}, {"task": "work"}], ("report", {}), "payload"),
])
def test_bad_input_is_refused_writing_nothing(batch_queue, engine, jobs, on_complete, message):
    with pytest.raises((sq.InvalidInputError, sq.UnknownTaskError), match=message):
        batch_queue.batch(jobs, on_complete=on_complete)
    assert _count(engine) == 0


def test_batch_status_refuses_an_id_that_is_not_a_batch(batch_queue):
    lone = batch_queue.enqueue("work", {"n": 1})
    with pytest.raises(sq.InvalidInputError, match=f"batch_id {lone} is not a batch"):
        batch_queue.batch_status(lone)
    with pytest.raises(sq.InvalidInputError, match="batch_id must be an integer"):
        batch_queue.batch_status("7")


def test_ctx_batch_is_none_for_a_job_without_dependencies(batch_queue):
    seen = []

    @batch_queue.task(name="lonely")
    def lonely(payload, ctx):
        seen.append(ctx.batch)

    batch_queue.enqueue("lonely", {})
    batch_queue.worker(queues=["default"]).run(until_empty=True)
    assert seen == [None]


def test_a_round_completing_many_batch_jobs_updates_the_callback_once(batch_queue, engine):
    from datetime import timedelta

    from sqla_queue import sql
    from sqla_queue.sql import catalog

    queue = batch_queue
    batch_id = queue.batch([{"task": "work", "payload": {"n": n}} for n in range(8)], on_complete=("report", {"tag": "r"}))
    jobs = queue.claim(worker_id="w", limit=8)
    params = {"job_ids": [j.id for j in jobs], "tokens": [j.claim_token for j in jobs], "results": [None] * 8,
              "queues": ["default"], "limit": 0, "worker_id": "w", "token": "x", "lease": timedelta(seconds=60),
              "tasks": None}
    with engine.connect() as conn:
        [[document]] = conn.execute(catalog.explain(sql.complete_and_claim_jobs(queue.core.statements.table),
                                                    analyze=True), params).all()
        left = conn.execute(text("SELECT status || ':' || waiting_on FROM sqla_queue_jobs WHERE id = :id"),
                            {"id": batch_id}).scalar_one()
        conn.rollback()
    [released] = [n for n in _nodes(document[0]["Plan"]) if n.get("Subplan Name") == "CTE completed_now_released"]
    assert released["Actual Rows"] == 1  # one UPDATE of the callback for the 8 completions
    assert left == "pending:0"


def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)
