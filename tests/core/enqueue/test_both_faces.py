"""Enqueue through both faces, one axis: ``enqueue``/``enqueue_many`` and their asyncio twins take
the same arguments, write the same rows, dedupe the same way, fail the same way and announce the
same events. An asyncio application's `AsyncSession` transaction decides whether its jobs exist,
exactly as a `Session` does."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from faces import Face, async_url, call
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import sqla_queue as sq
from sqla_queue.errors import ConfigurationError, InvalidInputError, UnknownTaskError

pytestmark = pytest.mark.usefixtures("clean_jobs")


@pytest.fixture(params=["sync", "async"])
def face(request, engine) -> Face:
    return Face(request.param, engine)


@pytest.fixture
def queue(engine, recorder) -> sq.Queue:
    """Built from the database URL: serves both faces (each from an engine of its own)."""
    q = sq.Queue(engine.url.render_as_string(hide_password=False), plugins=[recorder], load_entrypoints=False)

    @q.task(queue="emails", max_attempts=3)
    def send_email(payload, ctx):  # pragma: no cover - enqueued, never run here
        return None

    yield q
    q.engine.dispose()


def test_own_transaction_commits_the_job_and_announces_it(face, queue, job_row, recorder):
    job_id = face.enqueue(queue, "send_email", {"to": "a@b.c"}, delay=60, max_attempts=2)

    row = job_row(job_id)
    assert (row["task"], row["queue_name"], row["payload"], row["max_attempts"], row["status"]) == (
        "send_email", "emails", {"to": "a@b.c"}, 2, "pending")
    [event] = recorder.of("enqueued")
    assert (event.job_id, event.task, event.queue, event.deduplicated) == (job_id, "send_email", "emails", False)


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
def test_the_callers_session_transaction_decides(face, queue, count_jobs, commit):
    ids = face.in_session(queue, [call("send_email", {"n": 1}), call("send_email", {"n": 2}, idempotency_key="k")],
                          commit=commit)

    assert len(set(ids)) == 2
    assert count_jobs() == (2 if commit else 0)


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
def test_the_callers_connection_transaction_decides(face, queue, count_jobs, commit):
    jobs = [{"task": "send_email", "payload": {"n": n}} for n in range(5)]
    ids = face.in_connection(queue, jobs, commit=commit)

    assert ids == sorted(ids) and len(ids) == 5
    assert count_jobs() == (5 if commit else 0)


def test_enqueue_many_returns_ids_in_input_order_with_keys_resolved(face, queue, job_row):
    first = face.enqueue(queue, "send_email", {"n": 0}, idempotency_key="held")
    ids = face.enqueue_many(queue, [
        {"task": "send_email", "payload": {"n": 1}},
        {"task": "send_email", "payload": {"n": 2}, "idempotency_key": "held"},
        {"task": "send_email", "payload": {"n": 3}, "idempotency_key": "new"},
        {"task": "send_email", "payload": {"n": 4}, "idempotency_key": "new"},
    ])

    assert ids[1] == first and ids[2] == ids[3] and len({ids[0], ids[2], first}) == 3
    assert [job_row(i)["payload"]["n"] for i in ids] == [1, 0, 3, 3]


def test_dependencies_wait_the_same_way_from_either_face(face, queue, job_row):
    """``depends_on`` (and `sq.Earlier` in ``enqueue_many``) through either face: the dependent
    waits for its dependencies, in the same call's transaction."""
    first = face.enqueue(queue, "send_email", {})
    a, b = face.enqueue_many(queue, [{"task": "send_email", "payload": {}, "depends_on": [first]},
                                     {"task": "send_email", "payload": {}, "depends_on": [sq.Earlier(0), first]}])
    assert [(job_row(i)["status"], job_row(i)["waiting_on"]) for i in (first, a, b)] == [
        ("pending", 0), ("waiting", 1), ("waiting", 2)]
    assert job_row(first)["dependents"] == 2 and job_row(a)["dependents"] == 1
    with pytest.raises(InvalidInputError, match="do not exist: 999"):
        face.enqueue(queue, "send_email", {}, depends_on=[999])


def test_a_held_key_returns_the_holders_id_from_either_face(engine, queue, face):
    holder = Face("sync" if face.kind == "async" else "async", engine).enqueue(
        queue, "send_email", {}, idempotency_key="order-7")

    assert face.enqueue(queue, "send_email", {"again": True}, idempotency_key="order-7") == holder


@pytest.mark.parametrize(("bad", "error", "message"), [
    (call("nope", {}), UnknownTaskError, "unknown task 'nope'"),
    (call("send_email", {"x": object()}), InvalidInputError, "payload"),
    (call("send_email", {}, max_attempts=0), InvalidInputError, "max_attempts"),
    (call("send_email", {}, queue=""), InvalidInputError, "queue"),
    (call("send_email", {}, delay=-1), InvalidInputError, "delay"),
], ids=["task", "payload", "attempts", "queue", "delay"])
def test_bad_input_fails_the_same_way_and_writes_nothing(face, queue, count_jobs, bad, error, message):
    args, options = bad
    with pytest.raises(error, match=message):
        face.enqueue(queue, *args, **options)
    with pytest.raises(error, match=message):
        face.enqueue_many(queue, [{"task": "send_email", "payload": {}}, {"task": args[0], "payload": args[1], **options}])
    assert count_jobs() == 0


# -- what each face accepts ------------------------------------------------------------------


def test_a_queue_built_from_an_async_engine_serves_asyncio_and_refuses_synchronous_calls(engine, count_jobs):
    async def main() -> int:
        async_engine = create_async_engine(async_url(engine.url.render_as_string(hide_password=False)))
        try:
            queue = sq.Queue(async_engine, load_entrypoints=False)
            queue.task(name="send_email")(lambda payload, ctx: None)
            job_id = await queue.enqueue_async("send_email", {})
            for refused in (lambda: queue.enqueue("send_email", {}), queue.stats, lambda: queue.get_job(job_id)):
                with pytest.raises(ConfigurationError, match="built from an AsyncEngine.*enqueue_async"):
                    refused()
            return job_id
        finally:
            await async_engine.dispose()

    assert asyncio.run(main()) > 0
    assert count_jobs() == 1


def test_a_queue_built_from_a_sync_engine_needs_the_callers_async_transaction(engine, count_jobs):
    queue = sq.Queue(engine, load_entrypoints=False)
    queue.task(name="send_email")(lambda payload, ctx: None)

    with pytest.raises(ConfigurationError, match="synchronous Engine.*session=AsyncSession"):
        asyncio.run(queue.enqueue_async("send_email", {}))
    ids = Face("async", engine).in_session(queue, [call("send_email", {})], commit=True)
    assert len(ids) == 1 and count_jobs() == 1


def test_each_face_refuses_the_other_faces_session_and_connection(engine, queue, count_jobs):
    async def main() -> None:
        async_engine = create_async_engine(async_url(engine.url.render_as_string(hide_password=False)))
        try:
            async with AsyncSession(async_engine) as async_session, async_engine.connect() as async_conn:
                with pytest.raises(InvalidInputError, match="session=AsyncSession needs the asyncio method"):
                    queue.enqueue("send_email", {}, session=async_session)
                with pytest.raises(InvalidInputError, match="connection=AsyncConnection needs the asyncio"):
                    queue.enqueue_many([{"task": "send_email", "payload": {}}], connection=async_conn)
                with Session(engine) as session, engine.connect() as conn:
                    with pytest.raises(InvalidInputError, match="must be an AsyncSession.*synchronous method"):
                        await queue.enqueue_async("send_email", {}, session=session)
                    with pytest.raises(InvalidInputError, match="must be an AsyncConnection.*synchronous method"):
                        await queue.enqueue_many_async([{"task": "send_email", "payload": {}}], connection=conn)
                with pytest.raises(InvalidInputError, match="not both"):
                    await queue.enqueue_async("send_email", {}, session=async_session, connection=async_conn)
        finally:
            await async_engine.dispose()

    asyncio.run(main())
    assert count_jobs() == 0


# -- the idempotency race between an asyncio and a synchronous enqueuer ------------------------


def _waiting_on_a_lock(engine, database: str) -> int:
    with engine.connect() as conn:
        return conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = :db AND wait_event_type = 'Lock'"
        ), {"db": database}).scalar_one()


def _until(predicate: Callable[[], bool], what: str, timeout: float = 30) -> None:
    give_up = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < give_up, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.parametrize("holder_kind", ["async", "sync"], ids=["async-holds", "sync-holds"])
@pytest.mark.parametrize("commit", [True, False], ids=["holder-commits", "holder-rolls-back"])
def test_an_uncommitted_key_makes_the_other_face_wait_then_share_or_insert(engine, queue, count_jobs,
                                                                          holder_kind, commit):
    """The holder enqueues with a key in its own open transaction; the other face's enqueue with
    that key waits for it, then returns the holder's id (committed) or its own (rolled back)."""
    url = engine.url.render_as_string(hide_password=False)
    database = engine.url.database
    holder_took_key = threading.Event()
    finish_holder = threading.Event()
    holder_id: list[int] = []

    def hold_sync() -> None:
        with Session(create_engine(url, poolclass=None)) as session:
            session.begin()
            holder_id.append(queue.enqueue("send_email", {"by": "sync"}, idempotency_key="race", session=session))
            holder_took_key.set()
            finish_holder.wait(30)
            (session.commit if commit else session.rollback)()
            session.get_bind().dispose()

    def hold_async() -> None:
        async def main() -> None:
            async_engine = create_async_engine(async_url(url))
            try:
                async with AsyncSession(async_engine) as session:
                    await session.begin()
                    holder_id.append(await queue.enqueue_async(
                        "send_email", {"by": "async"}, idempotency_key="race", session=session))
                    holder_took_key.set()
                    await asyncio.to_thread(finish_holder.wait, 30)
                    await (session.commit() if commit else session.rollback())
            finally:
                await async_engine.dispose()

        asyncio.run(main())

    waiter = Face("sync" if holder_kind == "async" else "async", engine)
    holder = threading.Thread(target=hold_async if holder_kind == "async" else hold_sync)
    holder.start()
    try:
        assert holder_took_key.wait(30)
        result: list[int] = []
        second = threading.Thread(target=lambda: result.append(
            waiter.enqueue(queue, "send_email", {"by": waiter.kind}, idempotency_key="race")))
        second.start()
        _until(lambda: _waiting_on_a_lock(engine, database) == 1, "the second enqueue to wait on the key")
        assert not result  # still waiting for the holder
    finally:
        finish_holder.set()
        holder.join(30)
    second.join(30)

    assert len(result) == 1
    if commit:
        assert result == holder_id
    else:
        assert result[0] != holder_id[0]
    assert count_jobs() == 1


def test_a_terminated_pooled_connection_costs_no_failed_enqueue(create_database, face):
    """The server ends the backend of an idle pooled connection (a restart, an administrator's
    pg_terminate_backend): the next enqueue notices at checkout and reconnects instead of failing."""
    url = create_database()
    admin = create_engine(url, poolclass=None)
    queue = sq.Queue(url, load_entrypoints=False)
    queue.task(name="send_email")(lambda payload, ctx: None)
    try:
        assert face.enqueue(queue, "send_email", {"n": 1}) == 1
        with admin.connect() as conn:
            terminated = conn.execute(text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()")).scalar_one()
        assert terminated >= 1
        _until(lambda: _backends(admin) == 1, "the terminated backends to go")

        assert face.enqueue(queue, "send_email", {"n": 2}) == 2
    finally:
        queue.engine.dispose()
        admin.dispose()


def _backends(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")).scalar_one()


def test_dispose_async_closes_the_asyncio_engine_the_queue_made(create_database):
    url = create_database()
    admin = create_engine(url, poolclass=None)
    queue = sq.Queue(url, load_entrypoints=False)
    queue.task(name="send_email")(lambda payload, ctx: None)

    async def main() -> tuple[int, int]:
        await queue.enqueue_many_async([{"task": "send_email", "payload": {}}])
        before = await asyncio.to_thread(_backends, admin)
        await queue.dispose_async()
        _until(lambda: _backends(admin) == before - 1, "the pooled asyncio connection to close")
        await queue.enqueue_async("send_email", {})  # reconnects
        return before, await asyncio.to_thread(_backends, admin)

    try:
        before, after = asyncio.run(main())
        assert before == 2 and after == 2  # the admin connection and the queue's one
    finally:
        asyncio.run(queue.dispose_async())
        admin.dispose()


def test_scoped_sessions_as_applications_hold_them_work_on_each_face(engine, queue, count_jobs):
    """Flask-SQLAlchemy's ``db.session`` is a scoped_session; its asyncio twin exists too."""
    from sqlalchemy.ext.asyncio import async_scoped_session, async_sessionmaker
    from sqlalchemy.orm import scoped_session, sessionmaker

    scoped = scoped_session(sessionmaker(engine))
    try:
        with scoped.begin():
            queue.enqueue("send_email", {"face": "sync"}, session=scoped)
    finally:
        scoped.remove()

    async def main() -> None:
        async_engine = create_async_engine(async_url(engine.url.render_as_string(hide_password=False)))
        async_scoped = async_scoped_session(async_sessionmaker(async_engine), scopefunc=asyncio.current_task)
        try:
            async with async_scoped.begin():
                await queue.enqueue_async("send_email", {"face": "async"}, session=async_scoped)
            with pytest.raises(InvalidInputError, match="session=AsyncSession needs the asyncio method"):
                queue.enqueue("send_email", {}, session=async_scoped)
        finally:
            await async_scoped.remove()
            await async_engine.dispose()

    asyncio.run(main())
    assert count_jobs() == 2
