"""``Queue(..., testing="inline")``: a job's handler runs when the transaction that enqueued it
commits, as a worker would run it, and a handler's failure is raised from the commit."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

import sqla_queue as sq
from sqla_queue.testing import enqueued
from sqla_queue.testing import InlineLimitError


@pytest.fixture
def inline(own_engine: Engine, calls, effects) -> sq.Queue:
    q = sq.Queue(own_engine, load_entrypoints=False, testing="inline")

    @q.task(retry_delay=timedelta(minutes=5))
    def record(payload, ctx):
        calls.append(("record", payload, ctx))
        with ctx.transaction() as session:
            session.execute(text("INSERT INTO effects (job_id, note) VALUES (:j, :n)"),
                            {"j": ctx.job_id, "n": payload["note"]})
            if payload.get("fail"):
                raise RuntimeError(f"could not {payload['note']}")

    return q


def test_without_a_transaction_the_job_runs_before_enqueue_returns(inline, calls, effects, job_row):
    job_id = inline.enqueue("record", {"note": "now"})
    assert [c[2].job_id for c in calls] == [job_id]
    assert effects() == [(job_id, "now")] and job_row(job_id).status == "completed"


def test_in_a_session_the_job_runs_at_commit_and_not_at_rollback(inline, own_engine, calls, effects, job_row):
    with Session(own_engine) as session:
        session.execute(text("INSERT INTO effects (job_id, note) VALUES (0, 'order')"))
        job_id = inline.enqueue("record", {"note": "receipt"}, session=session)
        with session.begin_nested():
            pass  # a SAVEPOINT released is not a commit
        assert calls == []
        session.commit()
        assert [c[2].job_id for c in calls] == [job_id]
        assert effects() == [(0, "order"), (job_id, "receipt")]
        session.execute(text("SELECT 1"))  # the session is usable after the inline run

        inline.enqueue("record", {"note": "dropped"}, session=session)
        session.rollback()
    assert len(calls) == 1 and job_row(job_id).status == "completed"


def test_on_a_connection_the_job_runs_at_its_commit(inline, own_engine, calls, effects):
    with own_engine.begin() as conn:
        [first, second] = inline.enqueue_many([{"task": "record", "payload": {"note": "a"}},
                                               {"task": "record", "payload": {"note": "b"}}], connection=conn)
        assert calls == []
    assert [c[2].job_id for c in calls] == [first, second]
    with own_engine.connect() as conn:
        inline.enqueue("record", {"note": "rolled back"}, connection=conn)
        conn.rollback()
        conn.commit()  # nothing pending any more
    assert len(calls) == 2 and [row[1] for row in effects()] == ["a", "b"]


def test_a_handler_failure_is_recorded_and_raised_from_the_commit(inline, own_engine, job_row, effects):
    with pytest.raises(RuntimeError, match="could not pay"):
        inline.enqueue("record", {"note": "pay", "fail": True})
    [job] = enqueued(inline, "record")
    assert (job.attempts, job.last_error) == (1, "RuntimeError: could not pay")  # retried, in 5 minutes
    assert effects() == []  # the block's write was rolled back

    with Session(own_engine) as session:
        inline.enqueue("record", {"note": "ship", "fail": True}, session=session)
        with pytest.raises(RuntimeError, match="could not ship"):
            session.commit()
        assert session.execute(text("SELECT 2")).scalar() == 2


def test_a_job_invisible_after_the_commit_is_an_error_not_silence(inline, own_engine):
    with own_engine.connect() as conn:
        outer = conn.begin()
        session = Session(bind=conn, join_transaction_mode="create_savepoint")
        inline.enqueue("record", {"note": "x"}, session=session)
        with pytest.raises(sq.SqlaQueueError, match="inside an outer transaction that has not committed"):
            session.commit()
        outer.rollback()


def test_jobs_a_handler_enqueues_run_after_it_and_delayed_ones_wait(own_engine, job_row):
    q = sq.Queue(own_engine, load_entrypoints=False, testing="inline")
    order = []

    @q.task
    def parent(payload, ctx):
        with ctx.transaction() as session:
            q.enqueue("child", {"n": 1}, session=session)  # runs once this transaction commits
            q.enqueue("child", {"n": 2})  # committed already, still runs after the parent
            q.enqueue("child", {"n": 3}, delay=timedelta(hours=1))  # not due: left pending
            order.append("parent")

    @q.task
    def child(payload, ctx):
        order.append(f"child {payload['n']}")

    q.enqueue("parent", {})
    assert order == ["parent", "child 2", "child 1"]
    [waiting] = enqueued(q, "child")
    assert waiting.payload == {"n": 3}
    assert [r.job.task for r in sq.testing.drain(q, advance=timedelta(hours=2))] == ["child"]


def test_jobs_that_enqueue_themselves_stop_at_a_limit(own_engine, monkeypatch):
    monkeypatch.setattr("sqla_queue.worker.inline.MAX_JOBS", 5)
    q = sq.Queue(own_engine, load_entrypoints=False, testing="inline")

    @q.task
    def again(payload, ctx):
        q.enqueue("again", {})

    with pytest.raises(InlineLimitError, match="ran 5 jobs for one commit and jobs keep coming .next: job 6.: "
                                               "does a handler enqueue its own task"):
        q.enqueue("again", {})


def test_the_option_is_checked_and_async_enqueue_refused(own_engine):
    with pytest.raises(sq.ConfigurationError, match="testing must be None or 'inline', got 'inlined'"):
        sq.Queue(own_engine, testing="inlined")
    q = sq.Queue(own_engine, load_entrypoints=False, testing="inline")
    q.task(name="t")(lambda payload, ctx: None)
    import asyncio

    with pytest.raises(sq.ConfigurationError, match="enqueue_async does not run jobs inline"):
        asyncio.run(q.enqueue_async("t", {}))
    assert enqueued(q) == []
