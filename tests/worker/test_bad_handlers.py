"""Handlers a careless team writes: each one ends its attempt in a counted, stored outcome, and
the worker keeps serving the same slot (concurrency 1: a lost slot would leave the next job
unrun). Covers D1-D3 of the adversarial review and the suite it asked for."""

from __future__ import annotations

import asyncio
import sys
import threading
from datetime import timedelta

import pytest

import sqla_queue as sq

FAST = {"poll_interval": 0.05, "lease": timedelta(seconds=6), "concurrency": 1}


class Custom(BaseException):
    """A BaseException subclass that is not an Exception: pluggy, threads and loops all let it by."""


def raise_system_exit(payload, ctx):
    sys.exit(3)


def raise_keyboard_interrupt(payload, ctx):
    raise KeyboardInterrupt


def raise_custom(payload, ctx):
    raise Custom("custom base exception")


def raise_generator_exit(payload, ctx):
    raise GeneratorExit


def raise_a_megabyte(payload, ctx):
    raise RuntimeError("x" * 1_000_000)


def return_unserializable(payload, ctx):
    return {"when": object()}


def return_a_coroutine_from_sync(payload, ctx):
    async def later():
        return "ran"
    return later()


def spawn_a_thread(payload, ctx):
    threading.Thread(target=lambda: None, daemon=True).start()
    return "spawned"


async def raise_own_cancelled_error(payload, ctx):
    raise asyncio.CancelledError("the handler's own")


async def async_system_exit(payload, ctx):
    sys.exit(4)


async def async_keyboard_interrupt(payload, ctx):
    raise KeyboardInterrupt


HANDLERS = {
    # name: (handler, how the job ends after max_attempts=2, what last_error starts with)
    "system_exit": (raise_system_exit, "failed", "SystemExit"),
    "keyboard_interrupt": (raise_keyboard_interrupt, "failed", "KeyboardInterrupt"),
    "custom_base_exception": (raise_custom, "failed", "Custom: custom base exception"),
    "generator_exit": (raise_generator_exit, "failed", "GeneratorExit"),
    "megabyte_message": (raise_a_megabyte, "failed", "RuntimeError: xxx"),
    "unserializable_result": (return_unserializable, "failed", "ResultError"),
    "coroutine_from_sync": (return_a_coroutine_from_sync, "completed", None),
    "thread_spawning": (spawn_a_thread, "completed", None),
    "async_own_cancelled_error": (raise_own_cancelled_error, "failed", "CancelledError"),
    "async_system_exit": (async_system_exit, "failed", "SystemExit"),
    "async_keyboard_interrupt": (async_keyboard_interrupt, "failed", "KeyboardInterrupt"),
}


@pytest.mark.parametrize("name", sorted(HANDLERS))
def test_a_bad_handler_ends_counted_and_the_worker_keeps_serving(queue, name):
    handler, status, error = HANDLERS[name]
    queue.task(name="bad", max_attempts=2, retry_delay=0)(handler)
    ran: list[int] = []
    queue.task(name="good")(lambda payload, ctx: ran.append(ctx.job_id))
    bad = queue.enqueue("bad", {})
    good = queue.enqueue("good", {}, priority=-1)  # claimed after every attempt of the bad one

    summary = queue.worker(**FAST).run(until_empty=True)

    job = queue.get_job(bad)
    assert job.status.value == status, job.last_error
    assert job.attempts == (2 if status == "failed" else 1)  # every attempt counted
    if error is not None:
        assert job.last_error.startswith(error) and len(job.last_error) <= 500
    assert ran == [good]  # the slot survived: the next job ran on it
    assert summary.completed == (2 if status == "completed" else 1)
    assert summary.failed == (1 if status == "failed" else 0) and summary.retried == (1 if status == "failed" else 0)


def test_an_async_handlers_own_cancelled_error_does_not_loop(queue):
    """D2: once taken for the worker's own cancellation, released uncounted and re-run forever."""
    runs: list[int] = []

    @queue.task(max_attempts=3, retry_delay=0)
    async def cancels_itself(payload, ctx):
        runs.append(ctx.attempt)
        raise asyncio.CancelledError

    job_id = queue.enqueue(cancels_itself, {})
    queue.worker(**FAST).run(until_empty=True)
    assert runs == [1, 2, 3]
    assert queue.get_job(job_id).status is sq.JobStatus.FAILED


def test_shutdown_still_releases_a_running_async_job_uncounted(queue):
    """The worker's own cancellation is not the handler's outcome: the attempt is given back."""
    started = threading.Event()

    @queue.task(max_attempts=2)
    async def slow(payload, ctx):
        started.set()
        await asyncio.sleep(60)

    job_id = queue.enqueue(slow, {})
    worker = queue.worker(**FAST, shutdown_grace=0.2)
    thread = threading.Thread(target=worker.run)
    thread.start()
    assert started.wait(30)
    worker.stop()
    thread.join(30)
    job = queue.get_job(job_id)
    assert job.status is sq.JobStatus.PENDING and job.attempts == 0
