"""The run middleware (`sqla_queue_handle_job`): every handler call, sync and async, in the
worker, `drain` and inline mode, goes through the enabled implementations, nested in pluggy's
order, on the handler's own thread or task; what a middleware returns or raises is the
attempt's outcome. A runner that called the handler directly would fail each test here."""

from __future__ import annotations

import asyncio
import threading

import pytest
from sqlalchemy import Engine

import sqla_queue as sq
from sqla_queue.testing import drain


class Recorder:
    """Records each call around the handler: (label, task, where it ran)."""

    def __init__(self, label: str, seen: list) -> None:
        self.label = label
        self.seen = seen

    @sq.hookimpl
    def sqla_queue_handle_job(self, job, ctx, call_next):
        self.seen.append((f"{self.label} before", job.task, threading.current_thread().name))
        if ctx.is_async:
            async def wrapped():
                self.seen.append((f"{self.label} in task", job.task, asyncio.current_task() is not None))
                value = await call_next()
                self.seen.append((f"{self.label} after", job.task, value))
                return value
            return wrapped()
        value = call_next()
        self.seen.append((f"{self.label} after", job.task, value))
        return value


def _queue(engine: Engine, *plugins) -> tuple[sq.Queue, list]:
    seen: list = []
    queue = sq.Queue(engine, load_entrypoints=False, plugins=list(plugins))

    @queue.task
    def sync_work(payload, ctx):
        seen.append(("handler", "sync_work", threading.current_thread().name))
        return {"n": payload["n"]}

    @queue.task
    async def async_work(payload, ctx):
        seen.append(("handler", "async_work", asyncio.current_task() is not None))
        return {"n": payload["n"]}

    return queue, seen


def test_the_worker_calls_sync_and_async_handlers_through_the_middleware(engine, clean_jobs):
    seen: list = []
    queue, handler_seen = _queue(engine, Recorder("outer", seen))
    sync_id = queue.enqueue("sync_work", {"n": 1})
    async_id = queue.enqueue("async_work", {"n": 2})

    summary = queue.worker(concurrency=2, poll_interval=0.05).run(until_empty=True)

    assert summary.completed == 2
    sync_calls = [entry for entry in seen if entry[1] == "sync_work"]
    assert [label for label, *_ in sync_calls] == ["outer before", "outer after"]
    handler_thread = next(entry[2] for entry in handler_seen if entry[1] == "sync_work")
    assert sync_calls[0][2] == handler_thread  # on the handler's own thread
    assert sync_calls[1][2] == {"n": 1}
    async_calls = [entry for entry in seen if entry[1] == "async_work"]
    assert [label for label, *_ in async_calls] == ["outer before", "outer in task", "outer after"]
    assert async_calls[1][2] is True and async_calls[2][2] == {"n": 2}  # awaited inside the handler's task
    assert queue.get_job(sync_id).result == {"n": 1} and queue.get_job(async_id).result == {"n": 2}


def test_middlewares_nest_in_pluggys_order(engine, clean_jobs):
    seen: list = []
    first, second = Recorder("first", seen), Recorder("second", seen)
    queue, handler_seen = _queue(engine, first, second)  # pluggy asks the one registered last first
    queue.enqueue("sync_work", {"n": 3})
    assert [r.outcome for r in drain(queue)] == ["completed"]
    assert [label for label, *_ in seen] == ["second before", "first before", "first after", "second after"]
    assert [entry[0] for entry in handler_seen] == ["handler"]


class Replace:
    @sq.hookimpl
    def sqla_queue_handle_job(self, job, ctx, call_next):
        value = call_next()
        return {"wrapped": value} if not ctx.is_async else value


class Refuse:
    @sq.hookimpl
    def sqla_queue_handle_job(self, job, ctx, call_next):
        raise sq.NonRetryableError(f"middleware refused job {job.id}")


def test_what_a_middleware_returns_is_the_result(engine, clean_jobs):
    queue, _ = _queue(engine, Replace())
    job_id = queue.enqueue("sync_work", {"n": 4})
    drain(queue)
    assert queue.get_job(job_id).result == {"wrapped": {"n": 4}}


def test_what_a_middleware_raises_is_the_attempts_failure_and_the_handler_is_skipped(engine, clean_jobs):
    queue, handler_seen = _queue(engine, Refuse())
    job_id = queue.enqueue("sync_work", {"n": 5})
    assert [r.outcome for r in drain(queue)] == ["failed"]
    job = queue.get_job(job_id)
    assert job.status is sq.JobStatus.FAILED and f"middleware refused job {job_id}" in job.last_error
    assert handler_seen == []
    assert "in sqla_queue_handle_job" in job.last_traceback  # the stored traceback starts in the middleware


def test_inline_mode_runs_through_the_middleware(engine, clean_jobs):
    seen: list = []
    queue = sq.Queue(engine, load_entrypoints=False, plugins=[Recorder("inline", seen)], testing="inline")

    @queue.task
    def note(payload, ctx):
        return "done"

    queue.enqueue(note, {})
    assert [label for label, *_ in seen] == ["inline before", "inline after"]


def test_an_installed_middleware_is_opt_in():
    from sqla_queue.hookspecs import OBSERVER_HOOKS

    assert "sqla_queue_handle_job" not in OBSERVER_HOOKS and "sqla_queue_job_meta" not in OBSERVER_HOOKS


@pytest.mark.parametrize("bad", ["hookwrapper", "wrapper"])
def test_a_pluggy_wrapper_is_refused_with_the_plugins_name(engine, bad):
    class Wrapping:
        @sq.hookimpl(**{bad: True})
        def sqla_queue_handle_job(self, job, ctx, call_next):
            yield

    with pytest.raises(sq.ConfigurationError, match="Wrapping"):
        sq.Queue(engine, load_entrypoints=False, plugins=[Wrapping()])
