"""``@queue.task`` returns a `Task[P]`: ``task.enqueue(payload, **options)`` and
``enqueue_async`` put a job on the task's own Queue, and a type checker sees the handler's
payload type through them (mypy, run on a snippet, reports a wrong payload and no right one)."""

from __future__ import annotations

import asyncio
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

import sqla_queue as sq
from sqla_queue.errors import ConfigurationError

SNIPPET = '''\
from typing import TypedDict

import sqla_queue as sq

queue = sq.Queue("postgresql+psycopg://localhost/app")


class Receipt(TypedDict):
    order_id: int


@queue.task
def send_receipt(payload: Receipt, ctx: sq.JobContext) -> None: ...


@queue.task(queue="mail", retry_on=(TimeoutError,))
async def remind(payload: Receipt, ctx: sq.JobContext) -> None: ...


@queue.task(name="legacy")
def untyped(payload, ctx): ...


send_receipt.enqueue({"order_id": 1}, delay=60, priority=2)  # right
send_receipt.enqueue({"order_id": "1"})  # wrong: line 25
remind.enqueue({"order": 1})  # wrong: line 26
send_receipt.enqueue({"order_id": 1}, colour="red")  # wrong option: line 27
untyped.enqueue({"anything": object()})  # right: an unannotated handler takes any mapping
reveal_type(send_receipt)  # line 29


async def later() -> None:
    await remind.enqueue_async({"order_id": 2}, queue="mail")  # right
    await remind.enqueue_async({"order_id": None})  # wrong: line 34
'''


def test_mypy_sees_the_handlers_payload_type(tmp_path):
    (tmp_path / "snippet.py").write_text(SNIPPET)
    env = {**os.environ}
    package_root = Path(sq.__file__).resolve().parents[1]
    if package_root not in {Path(path).resolve() for path in site.getsitepackages()}:
        env["MYPYPATH"] = str(package_root)  # a checkout (an editable install mypy cannot follow)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent", "--cache-dir", str(tmp_path / "c"),
         "snippet.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("snippet.py:")]
    errors = sorted({int(line.split(":")[1]) for line in lines if ": error:" in line})
    assert errors == [25, 26, 27, 34], result.stdout + result.stderr
    [revealed] = [line for line in lines if "Revealed type" in line]
    assert "sqla_queue._tasks.Task[TypedDict(snippet.Receipt" in revealed, revealed


def test_task_enqueue_puts_a_job_on_its_queue_with_options(queue):
    @queue.task(queue="mail")
    def send(payload, ctx):
        return payload["n"]

    job_id = send.enqueue({"n": 1}, priority=5, delay=60)
    job = queue.get_job(job_id)
    assert (job.task, job.queue, job.priority, job.payload) == ("send", "mail", 5, {"n": 1})
    with pytest.raises(TypeError, match="'colour'"):
        send.enqueue({"n": 2}, colour="red")


def test_task_enqueue_async_on_a_queue_built_from_a_url(database_url, clean_jobs):
    queue = sq.Queue(database_url, load_entrypoints=False)

    @queue.task
    async def remind(payload, ctx):
        return None

    async def scenario():
        try:
            return await remind.enqueue_async({"n": 1}, queue="later")
        finally:
            await queue.dispose_async()

    job_id = asyncio.run(scenario())
    assert (queue.get_job(job_id).task, queue.get_job(job_id).queue) == ("remind", "later")
    queue.engine.dispose()


def test_a_task_built_by_hand_names_the_queue_method_to_use():
    task = sq.Task(name="orphan", handler=lambda payload, ctx: None, queue="default", max_attempts=1)
    with pytest.raises(ConfigurationError, match=r"task 'orphan' belongs to no Queue: use queue.enqueue\(task"):
        task.enqueue({})
