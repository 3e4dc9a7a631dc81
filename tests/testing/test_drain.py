"""`sqla_queue.testing.drain` / `drain_async`: due jobs run in the test's thread through the
real claim and the worker's run of a job; `advance` travels in database time."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import pytest
from sqlalchemy import text

import sqla_queue as sq
from sqla_queue.testing import DrainLimitError, drain, drain_async, enqueued


def test_runs_due_jobs_as_a_worker_and_returns_what_ran(queue, calls, job_row):
    job_id = queue.enqueue("send_receipt", {"order_id": 7})

    [ran] = drain(queue)

    assert (ran.job.id, ran.outcome, ran.result, ran.error) == (job_id, "completed", {"sent": 7}, None)
    assert job_row(job_id).status == "completed" and job_row(job_id).result == {"sent": 7}
    [(task, payload, ctx)] = calls
    assert (task, payload, ctx.attempt, ctx.queue, ctx.job_id) == ("send_receipt", {"order_id": 7}, 1, "mail", job_id)
    assert threading.current_thread() is threading.main_thread()
    assert drain(queue) == []  # nothing left


def test_by_default_every_queue_with_pending_jobs_of_the_registered_tasks(queue, calls):
    @queue.task(name="place_order")
    def place_order(payload, ctx):
        calls.append(("place_order", payload, ctx))
        queue.enqueue("send_receipt", {"order_id": payload["order_id"]})  # into "mail", mid-drain

    queue.enqueue("resize", {"n": 1})
    queue.enqueue("place_order", {"order_id": 3})

    ran = drain(queue)

    assert [(r.job.task, r.outcome) for r in ran] == [
        ("resize", "completed"), ("place_order", "completed"), ("send_receipt", "completed")]
    assert [r.job.queue for r in ran] == ["images", "default", "mail"]  # in due order, across queues


def test_across_queues_higher_priority_then_earlier_due_runs_first(queue):
    first = queue.enqueue("send_receipt", {"order_id": 1})
    urgent = queue.enqueue("resize", {"n": 1}, priority=5)
    second = queue.enqueue("flaky", {"succeed_on": 1})
    assert [r.job.id for r in drain(queue)] == [urgent, first, second]


def test_named_queues_only(queue):
    queue.enqueue("resize", {"n": 1})
    queue.enqueue("send_receipt", {"order_id": 1})
    queue.enqueue("flaky", {"succeed_on": 1})

    ran = drain(queue, queues=["mail", "images"])

    assert [r.job.task for r in ran] == ["resize", "send_receipt"]
    assert [j.task for j in enqueued(queue)] == ["flaky"]


def test_a_delayed_job_runs_only_when_advance_reaches_it(queue):
    soon = queue.enqueue("send_receipt", {"order_id": 1}, delay=timedelta(minutes=30))
    later = queue.enqueue("send_receipt", {"order_id": 2}, delay=timedelta(hours=3))

    assert drain(queue) == []
    assert [r.job.id for r in drain(queue, advance=timedelta(hours=1))] == [soon]
    assert [j.id for j in enqueued(queue)] == [later]
    assert [r.job.id for r in drain(queue, advance=3 * 3600 + 60)] == [later]  # seconds work too


def test_retries_within_advance_run_with_their_attempts(queue, calls, job_row):
    job_id = queue.enqueue("flaky", {"succeed_on": 3})  # retried after 10 minutes

    assert [r.outcome for r in drain(queue)] == ["retried"]  # the retry is 10 minutes away
    ran = drain(queue, advance=timedelta(hours=1))

    assert [(r.outcome, r.job.attempts) for r in ran] == [("retried", 2), ("completed", 3)]
    assert isinstance(ran[0].error, RuntimeError) and str(ran[0].error) == "attempt 2 fails"
    assert [ctx.attempt for _, _, ctx in calls] == [1, 2, 3]
    assert job_row(job_id).status == "completed" and job_row(job_id).result == 3


def test_a_job_out_of_attempts_fails(queue, job_row):
    job_id = queue.enqueue("flaky", {"succeed_on": 9})
    ran = drain(queue, advance=timedelta(hours=1))
    assert [r.outcome for r in ran] == ["retried", "retried", "failed"]
    assert job_row(job_id).status == "failed" and job_row(job_id).last_error == "RuntimeError: attempt 3 fails"


def test_a_snooze_within_advance_runs_again(queue):
    queue.enqueue("remind", {})
    assert [r.outcome for r in drain(queue)] == ["snoozed"]
    assert [(r.outcome, r.result) for r in drain(queue, advance=timedelta(hours=2))] == [("completed", "reminded")]


def test_one_pass_runs_only_what_was_due_when_it_began(queue, calls):
    @queue.task(name="chain")
    def chain(payload, ctx):
        calls.append(("chain", payload, ctx))
        queue.enqueue("chain", {"step": payload["step"] + 1}, priority=5)  # would be claimed first

    queue.enqueue("chain", {"step": 1})
    queue.enqueue("flaky", {"succeed_on": 2}, delay=timedelta(minutes=5))

    ran = drain(queue, until_empty=False, advance=timedelta(hours=1))

    assert sorted((r.job.task, r.outcome) for r in ran) == [("chain", "completed"), ("flaky", "retried")]
    assert sorted((j.task, j.payload.get("step")) for j in enqueued(queue)) == [("chain", 2), ("flaky", None)]


def test_a_job_that_enqueues_itself_forever_stops_at_max_jobs(queue, job_row):
    @queue.task(name="again")
    def again(payload, ctx):
        queue.enqueue("again", {"n": payload["n"] + 1})

    queue.enqueue("again", {"n": 0})

    with pytest.raises(DrainLimitError, match=r"drain ran max_jobs=5 jobs and job #6 \(again\) is still due: "
                                              r"does a handler enqueue its own job again\? Ran: again completed x5"
                       ) as stopped:
        drain(queue, max_jobs=5)
    assert len(stopped.value.ran) == 5
    assert job_row(6).status == "pending" and job_row(6).attempts == 0  # given back, attempt not spent


def test_the_handler_transaction_commits_with_the_completion(queue, effects, job_row):
    kept = queue.enqueue("record", {"note": "kept"})
    dropped = queue.enqueue("record", {"note": "dropped", "fail": True})

    assert sorted(r.outcome for r in drain(queue)) == ["completed", "retried"]
    assert effects() == [(kept, "kept")]
    assert job_row(dropped).status == "pending" and job_row(dropped).attempts == 1


def test_a_paused_queue_is_not_drained(queue):
    queue.enqueue("send_receipt", {"order_id": 1})
    queue.pause("mail")
    assert drain(queue) == [] and drain(queue, until_empty=False) == []
    queue.resume("mail")
    assert len(drain(queue)) == 1


def test_drain_async_runs_async_handlers_on_the_callers_loop(queue):
    seen = []

    @queue.task(name="notify")
    async def notify(payload, ctx):
        seen.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return payload["n"]

    async def scenario():
        queue.enqueue("notify", {"n": 1})
        queue.enqueue("notify", {"n": 2}, delay=timedelta(minutes=1))
        ran = await drain_async(queue, advance=timedelta(minutes=2))
        return asyncio.get_running_loop(), ran

    loop, ran = asyncio.run(scenario())
    assert [(r.outcome, r.result) for r in ran] == [("completed", 1), ("completed", 2)]
    assert seen == [loop, loop]


def test_drain_async_with_the_async_handler_transaction(sqla_queue_database_url, effects):
    queue = sq.Queue(sqla_queue_database_url, load_entrypoints=False)  # a URL serves both faces

    @queue.task(name="record_async")
    async def record_async(payload, ctx):
        async with ctx.transaction() as session:
            await session.execute(text("INSERT INTO effects (job_id, note) VALUES (:j, 'async')"),
                                  {"j": ctx.job_id})

    async def scenario():
        job_id = await queue.enqueue_async("record_async", {})
        try:
            return job_id, await drain_async(queue)
        finally:
            await queue.dispose_async()

    job_id, ran = asyncio.run(scenario())
    queue.engine.dispose()
    assert [r.outcome for r in ran] == ["completed"] and effects() == [(job_id, "async")]


def test_a_queue_built_from_an_async_engine_is_refused_clearly(sqla_queue_database_url):
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(sqla_queue_database_url.replace("+psycopg", "+psycopg_async"))
    queue = sq.Queue(engine, load_entrypoints=False)
    queue.task(name="t")(lambda payload, ctx: None)
    with pytest.raises(sq.ConfigurationError, match="build the test's Queue from the database URL"):
        drain(queue)
    with pytest.raises(sq.ConfigurationError, match="^run_job claims and records jobs"):
        sq.testing.run_job(queue, "t", {})
    asyncio.run(engine.dispose())


def test_the_sync_drain_runs_an_async_handler_in_its_own_loop(queue):
    @queue.task(name="notify")
    async def notify(payload, ctx):
        return "done"

    queue.enqueue("notify", {})
    assert [r.result for r in drain(queue)] == ["done"]


@pytest.mark.parametrize(("options", "message"), [
    ({"advance": -1}, "advance must not be negative"),
    ({"advance": "1h"}, "advance must be a timedelta or seconds, got str"),
    ({"queues": []}, "queues must name at least one queue"),
    ({"queues": ["mail", " "]}, "queues must be queue names, got ' '"),
    ({"max_jobs": 0}, "max_jobs must be a positive int, got 0"),
    ({"until_empty": "no"}, "until_empty must be True or False"),
])
def test_bad_options_are_refused_before_anything_runs(queue, options, message):
    queue.enqueue("send_receipt", {"order_id": 1})
    with pytest.raises(sq.InvalidInputError, match=message):
        drain(queue, **options)
    assert len(enqueued(queue)) == 1
