"""The payload size limit: checked on the encoded JSON before any round trip, per queue or task.

"Before any round trip" is observed, not assumed: the engine's pool events show that no
connection was even checked out, and a Queue on a server that does not exist still raises
`PayloadError`, not a connection error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import create_engine, event
from sqlalchemy.orm import Session

import sqla_queue as sq
from sqla_queue.errors import ConfigurationError, DatabaseError, PayloadError

NOWHERE = "postgresql://nobody:secret@127.0.0.1:1/nowhere"
KiB = 1024


def payload_of(size: int) -> dict:
    """A payload whose compact JSON is exactly `size` bytes."""
    overhead = len(json.dumps({"data": ""}, separators=(",", ":")))
    return {"data": "x" * (size - overhead)}


def checkouts(engine) -> list[object]:
    """Every pool checkout on `engine` from now on (what any statement would need first)."""
    seen: list[object] = []
    event.listen(engine, "checkout", lambda *args: seen.append(args[0]))
    return seen


@pytest.fixture
def own_engine(database_url):
    engine = create_engine(database_url)
    yield engine
    engine.dispose()


def test_the_default_limit_is_one_mebibyte(own_engine, clean_jobs, count_jobs):
    queue = sq.Queue(own_engine, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")
    assert queue.max_payload_bytes == 1024 * KiB
    job_id = queue.enqueue("send_email", payload_of(1024 * KiB))
    assert len(json.dumps(queue.get_job(job_id).payload, separators=(",", ":"))) == 1024 * KiB
    seen = checkouts(own_engine)
    with pytest.raises(PayloadError) as error:
        queue.enqueue("send_email", payload_of(1024 * KiB + 1))
    assert str(error.value).startswith(
        "payload of task 'send_email' is 1,048,577 bytes of JSON; the limit is 1,048,576"
    )
    assert seen == [] and count_jobs() == 1


def test_a_queue_limit_applies_to_every_task(own_engine, clean_jobs, count_jobs):
    queue = sq.Queue(own_engine, load_entrypoints=False, max_payload_bytes=100)
    queue.task(lambda payload, ctx: None, name="send_email")
    queue.enqueue("send_email", payload_of(100))
    seen = checkouts(own_engine)
    with pytest.raises(PayloadError, match=r"'send_email' is 101 bytes of JSON; the limit is 100 "):
        queue.enqueue("send_email", payload_of(101))
    assert seen == [] and count_jobs() == 1


@pytest.mark.parametrize("task_limit", [50, 5_000], ids=["smaller", "larger"])
def test_a_task_limit_wins_over_the_queue_limit(own_engine, clean_jobs, count_jobs, task_limit):
    queue = sq.Queue(own_engine, load_entrypoints=False, max_payload_bytes=1_000)

    @queue.task(max_payload_bytes=task_limit)
    def thumbnail(payload, ctx):
        return None

    assert queue.get_task("thumbnail").max_payload_bytes == task_limit
    queue.enqueue(thumbnail, payload_of(task_limit))
    with pytest.raises(PayloadError, match=rf"'thumbnail' is {task_limit + 1:,} bytes .* limit is {task_limit:,} "):
        queue.enqueue(thumbnail, payload_of(task_limit + 1))
    assert count_jobs() == 1


def test_the_message_names_no_payload_value(own_engine, clean_jobs):
    queue = sq.Queue(own_engine, load_entrypoints=False, max_payload_bytes=64)
    queue.task(lambda payload, ctx: None, name="send_email")
    with pytest.raises(PayloadError) as error:
        queue.enqueue("send_email", {"password": "hunter2" * 20})
    assert "hunter2" not in str(error.value) and "password" not in str(error.value)
    assert "store large data elsewhere" in str(error.value)


@pytest.mark.parametrize("how", ["own transaction", "session"])
def test_enqueue_many_writes_nothing_of_a_batch_with_one_large_payload(
    own_engine, clean_jobs, count_jobs, how
):
    queue = sq.Queue(own_engine, load_entrypoints=False, max_payload_bytes=200)
    queue.task(lambda payload, ctx: None, name="send_email")
    batch = [
        {"task": "send_email", "payload": {"n": 1}},
        {"task": "send_email", "payload": payload_of(201), "idempotency_key": "big"},
        {"task": "send_email", "payload": {"n": 3}},
    ]
    seen = checkouts(own_engine)
    with pytest.raises(PayloadError, match=r"^jobs\[1\]: payload of task 'send_email' is 201 bytes"):
        if how == "session":
            with Session(own_engine) as session:
                queue.enqueue_many(batch, session=session)
                session.commit()
        else:
            queue.enqueue_many(batch)
    assert seen == [] and count_jobs() == 0


def test_a_queue_built_from_a_url_rejects_before_its_autocommit_insert(database_url, clean_jobs, count_jobs):
    queue = sq.Queue(database_url, load_entrypoints=False, max_payload_bytes=100)
    queue.task(lambda payload, ctx: None, name="send_email")
    queue.enqueue_many([{"task": "send_email", "payload": {"n": 1}}])  # the pool is warm
    seen = checkouts(queue.engine)
    with pytest.raises(PayloadError):
        queue.enqueue("send_email", payload_of(101))
    with pytest.raises(PayloadError):
        queue.enqueue_many([{"task": "send_email", "payload": {}}, {"task": "send_email", "payload": payload_of(101)}])
    assert seen == [] and count_jobs() == 1
    queue.engine.dispose()


def test_the_check_runs_before_connecting(database_url):
    """On a server that does not exist, a small payload gets the connection error and a large
    one gets PayloadError: the size was checked before any connection was attempted."""
    for queue in (sq.Queue(NOWHERE, load_entrypoints=False), sq.Queue(create_engine(NOWHERE), load_entrypoints=False)):
        queue.task(lambda payload, ctx: None, name="send_email")
        with pytest.raises(DatabaseError) as error:
            queue.enqueue("send_email", {"n": 1})
        assert not isinstance(error.value, PayloadError) and "secret" not in str(error.value)
        with pytest.raises(PayloadError, match="1,048,577 bytes"):
            queue.enqueue("send_email", payload_of(1024 * KiB + 1))
        with pytest.raises(PayloadError, match=r"^jobs\[0\]: "):
            queue.enqueue_many([{"task": "send_email", "payload": payload_of(1024 * KiB + 1)}])


@pytest.mark.parametrize("value", [0, -1, 1.5, "1000", True, None])
def test_bad_limits_are_configuration_errors(value):
    with pytest.raises(ConfigurationError, match=rf"^max_payload_bytes must be a positive integer, got {value!r}$"):
        sq.Queue(NOWHERE, load_entrypoints=False, max_payload_bytes=value)
    queue = sq.Queue(NOWHERE, load_entrypoints=False)
    if value is None:  # on a task, None means "the queue's limit"
        assert queue.task(lambda payload, ctx: None, name="t", max_payload_bytes=None).max_payload_bytes is None
        return
    with pytest.raises(
        ConfigurationError,
        match=rf"^max_payload_bytes of task 'send_email' must be a positive integer, got {value!r}$",
    ):
        queue.task(lambda payload, ctx: None, name="send_email", max_payload_bytes=value)
    assert "send_email" not in queue.task_names


APP = textwrap.dedent(
    """
    import os
    import sqla_queue as sq

    queue = sq.Queue(os.environ["APP_DATABASE_URL"], load_entrypoints=False, max_payload_bytes=1000)

    @queue.task
    def send_email(payload, ctx):
        pass
    """
)


def test_cli_enqueue_of_a_large_payload_is_one_line_exit_2(tmp_path, database_url, clean_jobs, count_jobs):
    (tmp_path / "limitapp.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env["APP_DATABASE_URL"] = database_url
    script = str(Path(sys.executable).with_name("sqla-queue"))

    def enqueue(payload: dict) -> subprocess.CompletedProcess:
        return subprocess.run(
            [script, "--app", "limitapp:queue", "enqueue", "send_email", json.dumps(payload)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )

    result = enqueue(payload_of(1001))
    assert result.returncode == 2, result
    assert result.stderr == (
        "Error: payload of task 'send_email' is 1,001 bytes of JSON; the limit is 1,000 "
        "(max_payload_bytes): store large data elsewhere and enqueue a reference to it\n"
    )
    assert result.stdout == "" and count_jobs() == 0
    ok = enqueue(payload_of(1000))
    assert ok.returncode == 0, ok.stderr
    assert count_jobs() == 1
