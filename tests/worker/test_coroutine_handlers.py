"""Coroutine handlers are never recorded completed without their body running: `@queue.task`
refuses async callables, and a handler that returns an awaitable anyway fails its job."""

from __future__ import annotations

import functools
import gc
import warnings
from datetime import timedelta

import pytest
from sqlalchemy import text

import sqla_queue as sq
from sqla_queue.errors import UnknownTaskError

FAST = {"poll_interval": 0.05, "lease": timedelta(seconds=6)}


async def fetch_page(payload, ctx):  # pragma: no cover - never awaited by design
    return None


class AsyncCallable:
    async def __call__(self, payload, ctx):  # pragma: no cover
        return None


class Client:
    async def refresh(self, payload, ctx):  # pragma: no cover
        return None


async def stream_rows(payload, ctx):  # pragma: no cover
    yield payload


@pytest.mark.parametrize(("handler", "name", "shown"), [
    (fetch_page, None, "fetch_page"),
    (fetch_page, "pages", "pages"),
    (functools.partial(fetch_page), "partial_pages", "partial_pages"),
    (functools.partial(functools.partial(fetch_page)), "nested", "nested"),
    (AsyncCallable(), "callable_object", "callable_object"),
    (Client().refresh, None, "refresh"),
    (stream_rows, None, "stream_rows"),
], ids=["function", "named", "partial", "nested-partial", "async-__call__", "bound-method", "async-generator"])
def test_registering_an_async_handler_is_refused_naming_the_task(queue, handler, name, shown):
    with pytest.raises(TypeError, match=rf"task '{shown}'.*async handlers are not supported yet"):
        queue.task(name=name)(handler) if name else queue.task(handler)
    assert shown not in queue.task_names
    with pytest.raises(UnknownTaskError):
        queue.get_task(shown)


def test_sync_handlers_of_every_shape_are_still_accepted(queue):
    def plain(payload, ctx):
        return None

    class Callable:
        def __call__(self, payload, ctx):
            return None

    assert queue.task(plain).name == "plain"
    assert queue.task(name="partial_plain")(functools.partial(plain)).name == "partial_plain"
    assert queue.task(name="object")(Callable()).name == "object"


class Awaitable:
    """An awaitable that is not a coroutine (no close())."""

    def __await__(self):  # pragma: no cover - never awaited
        yield


def test_a_handler_returning_a_coroutine_fails_its_job_without_running_it(queue, engine):
    ran: list[int] = []

    async def body(payload):
        ran.append(payload["n"])  # pragma: no cover - must never run

    @queue.task(max_attempts=5, retry_delay=0)
    def wraps_async(payload, ctx):
        return body(payload)  # a sync wrapper around async code: returns an unawaited coroutine

    job_id = queue.enqueue("wraps_async", {"n": 1})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = queue.worker(concurrency=1, **FAST).run(until_empty=True)
        gc.collect()

    assert ran == []
    assert not [w for w in caught if "never awaited" in str(w.message)], [str(w.message) for w in caught]
    assert (summary.completed, summary.failed, summary.retried) == (0, 1, 0)
    job = queue.get_job(job_id)
    assert job.status is sq.JobStatus.FAILED  # not retried although 4 attempts were left
    assert job.attempts == 1
    assert "task 'wraps_async' returned an awaitable (coroutine)" in job.last_error
    assert "async handlers are not supported yet" in job.last_error
    with engine.connect() as conn:
        completed = conn.execute(text("SELECT count(*) FROM sqla_queue_jobs WHERE status = 'completed'")).scalar()
    assert completed == 0


def test_a_handler_returning_another_awaitable_fails_its_job_too(queue):
    @queue.task(max_attempts=3)
    def returns_awaitable(payload, ctx):
        return Awaitable()

    job_id = queue.enqueue("returns_awaitable", {})
    summary = queue.worker(concurrency=1, **FAST).run(until_empty=True)

    assert (summary.completed, summary.failed) == (0, 1)
    job = queue.get_job(job_id)
    assert job.status is sq.JobStatus.FAILED and job.attempts == 1
    assert "returned an awaitable (Awaitable)" in job.last_error
