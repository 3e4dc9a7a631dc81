"""Job metadata: `enqueue(..., meta=...)` and the `sqla_queue_job_meta` hook store a mapping
in the job's ``meta`` column; the handler reads it as ``ctx.meta`` on every attempt, whoever
runs it (worker or `drain`), sync and async alike. Bad metadata is refused before anything is
written."""

from __future__ import annotations

import asyncio
import contextvars

import pytest
from sqlalchemy import Engine, text

import sqla_queue as sq
from sqla_queue.testing import drain

trace_id = contextvars.ContextVar("trace_id", default=None)


class TraceContext:
    @sq.hookimpl
    def sqla_queue_job_meta(self, task):
        value = trace_id.get()
        return None if value is None else {"trace_id": value, "from": "hook"}


def _queue(engine: Engine, *plugins) -> tuple[sq.Queue, list]:
    seen: list = []
    queue = sq.Queue(engine, load_entrypoints=False, plugins=list(plugins))

    @queue.task(max_attempts=2, retry_delay=0)
    def flaky(payload, ctx):
        seen.append(dict(ctx.meta))
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")

    @queue.task
    async def read_async(payload, ctx):
        seen.append(dict(ctx.meta))

    return queue, seen


def _stored(engine: Engine, job_id: int):
    with engine.connect() as conn:
        return conn.execute(text("SELECT meta FROM sqla_queue_jobs WHERE id = :id"), {"id": job_id}).scalar_one()


def test_meta_given_to_enqueue_reaches_every_attempt(engine, clean_jobs):
    queue, seen = _queue(engine)
    job_id = queue.enqueue("flaky", {}, meta={"trace_id": "abc", "tenant": 7})
    assert [r.outcome for r in drain(queue)] == ["retried", "completed"]
    assert seen == [{"trace_id": "abc", "tenant": 7}] * 2
    assert _stored(engine, job_id) == {"trace_id": "abc", "tenant": 7}
    assert queue.get_job(job_id).meta == {"trace_id": "abc", "tenant": 7}


def test_the_hook_fills_meta_from_the_enqueuing_context_and_the_caller_wins(engine, clean_jobs):
    queue, seen = _queue(engine, TraceContext())
    token = trace_id.set("req-1")
    try:
        hooked = queue.enqueue("flaky", {})
        both = queue.enqueue("flaky", {}, meta={"from": "caller"})
        many = queue.enqueue_many([{"task": "flaky", "payload": {}, "meta": {"extra": True}}])
    finally:
        trace_id.reset(token)
    untraced = queue.enqueue("flaky", {})
    assert _stored(engine, hooked) == {"trace_id": "req-1", "from": "hook"}
    assert _stored(engine, both) == {"trace_id": "req-1", "from": "caller"}
    assert _stored(engine, many[0]) == {"trace_id": "req-1", "from": "hook", "extra": True}
    assert _stored(engine, untraced) is None


def test_the_worker_hands_meta_to_sync_and_async_handlers(engine, clean_jobs):
    queue, seen = _queue(engine)
    queue.enqueue("read_async", {}, meta={"trace_id": "t-async"})
    queue.enqueue("flaky", {}, meta={"trace_id": "t-sync"})
    queue.worker(concurrency=2, poll_interval=0.05).run(until_empty=True)
    assert sorted(entry["trace_id"] for entry in seen) == ["t-async", "t-sync", "t-sync"]


def test_enqueue_async_stores_meta(engine, clean_jobs, database_url):
    queue, seen = _queue(engine)
    url_queue = sq.Queue(database_url, load_entrypoints=False)
    url_queue.task(name="read_async")(lambda payload, ctx: None)

    async def enqueue():
        try:
            return await url_queue.enqueue_async("read_async", {}, meta={"trace_id": "via-async"})
        finally:
            await url_queue.dispose_async()

    asyncio.run(enqueue())
    drain(queue)
    assert seen == [{"trace_id": "via-async"}]
    url_queue.engine.dispose()


def test_ctx_meta_is_read_only_and_empty_without_meta(engine, clean_jobs):
    queue = sq.Queue(engine, load_entrypoints=False)
    tried: list = []

    @queue.task
    def mutate(payload, ctx):
        tried.append(dict(ctx.meta))
        with pytest.raises(TypeError):
            ctx.meta["x"] = 1  # type: ignore[index]

    queue.enqueue(mutate, {})
    assert [r.outcome for r in drain(queue)] == ["completed"]
    assert tried == [{}]


@pytest.mark.parametrize(("meta", "message"), [
    (["not", "a", "mapping"], "meta"),
    ({1: "non-string key"}, "meta"),
    ({"value": object()}, "meta"),
    ({"big": "x" * 9000}, "meta"),
    ({"nan": float("nan")}, "meta"),
])
def test_bad_meta_is_refused_and_nothing_is_written(engine, clean_jobs, meta, message):
    queue, _ = _queue(engine)
    with pytest.raises(sq.InvalidInputError, match=message):
        queue.enqueue("flaky", {}, meta=meta)
    with pytest.raises(sq.InvalidInputError, match=message):
        queue.enqueue_many([{"task": "flaky", "payload": {}}, {"task": "flaky", "payload": {}, "meta": meta}])
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM sqla_queue_jobs")).scalar_one() == 0


class BadMeta:
    @sq.hookimpl
    def sqla_queue_job_meta(self):
        return ["not", "a", "mapping"]


def test_a_hook_answer_that_is_not_a_mapping_is_a_plugin_error_naming_it(engine, clean_jobs):
    queue, _ = _queue(engine, BadMeta())
    with pytest.raises(sq.PluginError, match="BadMeta"):
        queue.enqueue("flaky", {})
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM sqla_queue_jobs")).scalar_one() == 0
