"""`Queue.wait` and `Queue.wait_async`: the finished job's view, woken by the finish
notification (LISTEN), with a poll fallback for a notification that never comes.

Whether a wait returned *because of* the notification is shown without timing it: the poll
fallback is set to an hour, so a wait that returns within the test's patience was woken."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text

import sqla_queue as sq
from sqla_queue.core import waiter as _waiter
from sqla_queue.sql.notify import finished_channel

from waiting import wait_until

FAST = {"poll_interval": 0.05, "concurrency": 2}
PATIENCE = 60  # seconds a test waits for something that should take milliseconds


class Waiting:
    """``queue.wait(...)`` (or any call) in a thread: its result or exception once it returns."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.result = call()
        except BaseException as exc:  # handed to the test
            self.error = exc

    def outcome(self) -> Any:
        self._thread.join(PATIENCE)
        assert not self._thread.is_alive(), f"still waiting after {PATIENCE}s"
        if self.error is not None:
            raise self.error
        return self.result


@pytest.fixture
def no_polling(monkeypatch) -> None:
    """The poll fallback an hour apart: only a notification wakes a waiter within a test."""
    monkeypatch.setattr(_waiter, "POLL_INTERVAL", 3600.0)


@pytest.fixture
def listening(engine: Engine, queue) -> Callable[[int], None]:
    """``listening(n)``: return once `n` backends LISTEN on the table's finish channel (the
    waiters' connections, idle after their LISTEN)."""
    listen = f'LISTEN "{finished_channel(queue.table)}"'

    def wait_for(count: int) -> None:
        with engine.connect() as conn:
            for _ in range(PATIENCE * 20):
                found = conn.execute(text(
                    "SELECT count(*) FROM pg_stat_activity WHERE query = :listen AND state = 'idle' "
                    "AND datname = current_database()"), {"listen": listen}).scalar_one()
                if found >= count:
                    return
                conn.rollback()  # pg_stat_activity is read once per transaction
                time.sleep(0.05)
        raise AssertionError(f"{count} waiter(s) never LISTENed")

    return wait_for


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Released at teardown too, so a failed test never leaves a handler blocked."""
    event = threading.Event()
    yield event
    event.set()


def test_wait_returns_the_completed_job_woken_by_its_notification(queue, no_polling, listening, gate):
    @queue.task(name="report")
    def report(payload, ctx):
        gate.wait(PATIENCE)
        return {"rows": payload["n"] * 2}

    job_id = queue.enqueue("report", {"n": 21})
    worker = Waiting(lambda: queue.worker(**FAST).run(until_empty=True))
    waiting = Waiting(lambda: queue.wait(job_id))
    listening(1)
    gate.set()  # the job finishes only now, while the waiter LISTENs

    job = waiting.outcome()
    assert (job.id, job.status, job.result) == (job_id, sq.JobStatus.COMPLETED, {"rows": 42})
    assert worker.outcome().completed == 1


def test_one_notification_for_a_batch_wakes_the_waiter_of_each_job(queue, no_polling, listening, gate):
    queue.task(name="slow")(lambda payload, ctx: gate.wait(PATIENCE) and None)
    ids = queue.enqueue_many([{"task": "slow", "payload": {"n": n}} for n in range(3)])
    worker = Waiting(lambda: queue.worker(**FAST).run(until_empty=True))
    waiters = [Waiting(lambda job_id=job_id: queue.wait(job_id, timeout=timedelta(minutes=5)))
               for job_id in ids]
    listening(3)
    gate.set()

    assert [(w.outcome().id, w.outcome().status) for w in waiters] == \
        [(job_id, sq.JobStatus.COMPLETED) for job_id in ids]
    assert worker.outcome().completed == 3


def test_a_finished_job_is_returned_at_once(queue, no_polling):
    queue.task(name="answer")(lambda payload, ctx: None)
    job_id = queue.enqueue("answer", {})
    queue.worker(**FAST).run(until_empty=True)

    assert queue.wait(job_id, timeout=0).status == sq.JobStatus.COMPLETED


def test_wait_returns_a_failed_job(queue, no_polling, listening, gate):
    def broken(payload, ctx):
        gate.wait(PATIENCE)
        raise sq.NonRetryableError("the report's source is gone")

    queue.task(name="broken")(broken)
    job_id = queue.enqueue("broken", {})
    worker = Waiting(lambda: queue.worker(**FAST).run(until_empty=True))
    waiting = Waiting(lambda: queue.wait(job_id))
    listening(1)
    gate.set()

    job = waiting.outcome()
    assert job.status == sq.JobStatus.FAILED
    assert "the report's source is gone" in job.last_error
    worker.outcome()


def test_wait_returns_a_job_cancelled_while_pending(queue, engine, no_polling, listening):
    job_id = queue.enqueue("send_email", {}, delay=3600)
    waiting = Waiting(lambda: queue.wait(job_id))
    listening(1)
    # The waiter marks the row watched in a short transaction after its LISTEN; a cancel during
    # it finds the row busy (and says so). Cancel once the mark committed.
    wait_until(lambda: _watched(engine, job_id), "the waiter to mark the job watched")
    queue.cancel(job_id)

    assert waiting.outcome().status == sq.JobStatus.CANCELLED


def _watched(engine: Engine, job_id: int) -> bool:
    with engine.connect() as conn:
        return conn.execute(text("SELECT watched FROM sqla_queue_jobs WHERE id = :id"), {"id": job_id}).scalar_one()


def test_the_poll_fallback_finds_a_job_no_notification_announced(queue, monkeypatch, run_sql, listening):
    """A finish whose notification never arrives (lost, or a pooler that drops LISTEN) is found
    by the periodic re-read; here the row is finished by hand, without NOTIFY."""
    monkeypatch.setattr(_waiter, "POLL_INTERVAL", 0.1)
    job_id = queue.enqueue("send_email", {})
    waiting = Waiting(lambda: queue.wait(job_id, timeout=PATIENCE))
    listening(1)
    run_sql("UPDATE sqla_queue_jobs SET status = 'failed', last_error = 'by hand' WHERE id = :id", id=job_id)

    assert waiting.outcome().last_error == "by hand"


def test_notifications_for_other_jobs_do_not_end_the_wait(queue, monkeypatch):
    monkeypatch.setattr(_waiter, "POLL_INTERVAL", 0.05)
    queue.task(name="quick")(lambda payload, ctx: None)
    mine = queue.enqueue("send_email", {}, delay=3600)
    queue.enqueue_many([{"task": "quick", "payload": {}}] * 3)
    waiting = Waiting(lambda: queue.wait(mine, timeout=1.5))
    queue.worker(**FAST).run(until_empty=True)

    with pytest.raises(sq.WaitTimeoutError):
        waiting.outcome()


def test_timeout_names_the_job_and_its_state(queue):
    job_id = queue.enqueue("send_email", {}, delay=3600)

    with pytest.raises(sq.WaitTimeoutError, match=rf"job {job_id} did not finish within 0.2s: it is still pending") as raised:
        queue.wait(job_id, timeout=timedelta(milliseconds=200))
    assert isinstance(raised.value, TimeoutError) and isinstance(raised.value, sq.SqlaQueueError)


@pytest.mark.parametrize(("job_id", "timeout", "message"), [
    (10**9, None, "job 1000000000 does not exist"),
    (0, None, "job_id must be a positive integer"),
    ("7", None, "job_id must be an integer, got str"),
    (1, -1, "timeout must be non-negative"),
    (1, "soon", "timeout must be a timedelta or seconds, got str"),
])
def test_bad_input_is_refused(queue, job_id, timeout, message):
    queue.enqueue("send_email", {}, delay=3600)  # job 1 exists

    with pytest.raises(sq.InvalidInputError, match=message):
        queue.wait(job_id, timeout=timeout)


# -- the asyncio twin ------------------------------------------------------------------------


@pytest.fixture
def url_queue(database_url, clean_jobs) -> Iterator[sq.Queue]:
    """A queue from the URL: it has an asyncio engine of its own for `wait_async`."""
    q = sq.Queue(database_url, load_entrypoints=False)
    yield q
    asyncio.run(q.dispose_async())
    q.engine.dispose()


def test_wait_async_is_woken_by_the_notification_on_the_event_loop(url_queue, no_polling, listening):
    @url_queue.task(name="total")
    async def total(payload, ctx):
        await asyncio.sleep(0)
        return sum(payload["values"])

    async def scenario() -> sq.JobView:
        job_id = await url_queue.enqueue_async("total", {"values": [1, 2, 3]})
        waiter = asyncio.create_task(url_queue.wait_async(job_id))
        # The loop stays free while the waiter waits: these threads are awaited on it.
        await asyncio.to_thread(listening, 1)
        await asyncio.to_thread(lambda: url_queue.worker(**FAST).run(until_empty=True))
        return await asyncio.wait_for(waiter, PATIENCE)

    job = asyncio.run(scenario())
    assert (job.id, job.status, job.result) == (1, sq.JobStatus.COMPLETED, 6)


def test_wait_async_times_out_and_refuses_unknown_jobs(url_queue):
    async def scenario() -> None:
        job_id = await url_queue.enqueue_async("send_email", {}, delay=3600)
        with pytest.raises(sq.WaitTimeoutError, match=f"job {job_id} .* still pending"):
            await url_queue.wait_async(job_id, timeout=0.2)
        with pytest.raises(sq.InvalidInputError, match="job 999 does not exist"):
            await url_queue.wait_async(999)

    url_queue.task(name="send_email")(lambda payload, ctx: None)
    asyncio.run(scenario())


def test_wait_async_on_an_engine_built_queue_gives_advice_it_can_take(queue):
    """wait_async takes no session=, so the advice names what does work: a URL or AsyncEngine,
    or the synchronous wait in a thread, which is then shown to work."""
    job_id = queue.enqueue("send_email", {})

    with pytest.raises(sq.ConfigurationError) as refused:
        asyncio.run(queue.wait_async(job_id))
    message = str(refused.value)
    assert "session=" not in message
    assert "database URL" in message and "AsyncEngine" in message
    assert "asyncio.to_thread(queue.wait, job_id)" in message
    queue.cancel(job_id)

    async def in_a_thread() -> sq.JobView:
        return await asyncio.to_thread(queue.wait, job_id)

    assert asyncio.run(in_a_thread()).status == sq.JobStatus.CANCELLED


def test_a_broken_listen_connection_leaves_the_wait_to_the_poll(queue, engine, monkeypatch, run_sql, listening):
    monkeypatch.setattr(_waiter, "POLL_INTERVAL", 0.1)
    job_id = queue.enqueue("send_email", {}, delay=3600)
    waiting = Waiting(lambda: queue.wait(job_id, timeout=PATIENCE))
    listening(1)
    with engine.connect() as conn:
        killed = conn.execute(text(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE query = :listen AND datname = current_database()"),
            {"listen": f'LISTEN "{finished_channel(queue.table)}"'}).scalar_one()
    assert killed == 1
    run_sql("UPDATE sqla_queue_jobs SET status = 'failed', last_error = 'by hand' WHERE id = :id", id=job_id)

    assert waiting.outcome().last_error == "by hand"


def test_only_a_job_someone_waits_for_is_watched(queue, job_row, listening, gate):
    """Finishing statements announce watched jobs only: a job nobody waits for costs no NOTIFY."""
    queue.task(name="held")(lambda payload, ctx: gate.wait(PATIENCE) and None)
    waited, unwatched = queue.enqueue("held", {}), queue.enqueue("held", {})
    worker = Waiting(lambda: queue.worker(**FAST).run(until_empty=True))
    waiting = Waiting(lambda: queue.wait(waited, timeout=PATIENCE))
    listening(1)
    gate.set()

    assert waiting.outcome().status == sq.JobStatus.COMPLETED
    worker.outcome()
    assert (job_row(waited)["watched"], job_row(unwatched)["watched"]) == (True, False)


def test_wait_async_also_falls_back_to_the_poll_when_its_listen_connection_breaks(
        url_queue, engine, monkeypatch, run_sql, listening, caplog):
    monkeypatch.setattr(_waiter, "POLL_INTERVAL", 0.1)
    listen = f'LISTEN "{finished_channel(url_queue.table)}"'

    def break_the_listener_then_finish(job_id: int) -> None:
        listening(1)
        with engine.connect() as conn:
            assert conn.execute(text(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE query = :listen AND datname = current_database()"), {"listen": listen}).scalar_one() == 1
        # Finished only once the waiter has noticed: finished sooner, its next read of the row
        # (every 0.1 s here) can find the job done before it listens again, and it never learns
        # that the connection broke.
        wait_until(lambda: "LISTEN connection lost" in caplog.text, "the waiter noticed the broken LISTEN")
        run_sql("UPDATE sqla_queue_jobs SET status = 'failed', last_error = 'by hand' WHERE id = :id", id=job_id)

    async def scenario() -> sq.JobView:
        job_id = await url_queue.enqueue_async("send_email", {}, delay=3600)
        waiter = asyncio.create_task(url_queue.wait_async(job_id, timeout=PATIENCE))
        await asyncio.to_thread(break_the_listener_then_finish, job_id)
        return await asyncio.wait_for(waiter, PATIENCE)

    url_queue.task(name="send_email")(lambda payload, ctx: None)
    assert asyncio.run(scenario()).last_error == "by hand"
    assert "LISTEN connection lost" in caplog.text
