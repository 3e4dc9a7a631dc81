"""Which handlers are async: every shape of coroutine function is recognised at registration
(and run by the worker on its event loop, never recorded completed unrun); an async generator,
which cannot be awaited to completion, is refused."""

from __future__ import annotations

import asyncio
import functools
from datetime import timedelta

import pytest

import sqla_queue as sq
from sqla_queue.errors import UnknownTaskError

FAST = {"poll_interval": 0.05, "lease": timedelta(seconds=6)}
RAN: list[str] = []


async def fetch_page(payload, ctx):
    await asyncio.sleep(0)
    RAN.append(payload["shape"])


class AsyncCallable:
    async def __call__(self, payload, ctx):
        await fetch_page(payload, ctx)


class Client:
    async def refresh(self, payload, ctx):
        await fetch_page(payload, ctx)


async def stream_rows(payload, ctx):  # pragma: no cover - refused at registration
    yield payload


SHAPES = [
    (fetch_page, None, "fetch_page"),
    (functools.partial(fetch_page), "partial_pages", "partial_pages"),
    (functools.partial(functools.partial(fetch_page)), "nested", "nested"),
    (AsyncCallable(), "callable_object", "callable_object"),
    (Client().refresh, None, "refresh"),
]


@pytest.mark.parametrize(("handler", "name", "shown"), SHAPES,
                         ids=["function", "partial", "nested-partial", "async-__call__", "bound-method"])
def test_every_shape_of_async_handler_is_registered_async_and_awaited_by_the_worker(queue, handler, name, shown):
    RAN.clear()
    task = queue.task(name=name)(handler) if name else queue.task(handler)
    assert (task.name, task.is_async) == (shown, True)
    job_id = queue.enqueue(shown, {"shape": shown})

    summary = queue.worker(concurrency=1, **FAST).run(until_empty=True)

    assert RAN == [shown] and summary.completed == 1
    assert queue.get_job(job_id).status is sq.JobStatus.COMPLETED


def test_sync_handlers_of_every_shape_are_registered_sync(queue):
    def plain(payload, ctx):
        return None

    class Callable:
        def __call__(self, payload, ctx):
            return None

    assert not queue.task(plain).is_async
    assert not queue.task(name="partial_plain")(functools.partial(plain)).is_async
    assert not queue.task(name="object")(Callable()).is_async


def test_an_async_generator_is_refused_naming_the_task(queue):
    with pytest.raises(TypeError, match=r"task 'stream_rows'.*async generator"):
        queue.task(stream_rows)
    assert "stream_rows" not in queue.task_names
    with pytest.raises(UnknownTaskError):
        queue.get_task("stream_rows")
