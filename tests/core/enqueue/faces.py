"""One test, two faces: the synchronous API and its asyncio twin driven the same way.

`Face` does what a host application does with either face: enqueue in the queue's own
transaction, in a session's or a connection's transaction (committed or rolled back), or many
at once. The async face runs each call in ``asyncio.run`` with an `AsyncSession` /
`AsyncConnection` of an `AsyncEngine` on the test's database, as an asyncio application would.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

Call = tuple[tuple[Any, ...], dict[str, Any]]


def async_url(url: str) -> str:
    return make_url(url).set(drivername="postgresql+psycopg_async").render_as_string(hide_password=False)


def call(*args: Any, **options: Any) -> Call:
    return args, options


class Face:
    def __init__(self, kind: str, engine: Engine) -> None:
        self.kind = kind
        self.engine = engine
        self.url = engine.url.render_as_string(hide_password=False)

    def enqueue(self, queue, /, *args, **options) -> int:
        if self.kind == "sync":
            return queue.enqueue(*args, **options)
        return asyncio.run(queue.enqueue_async(*args, **options))

    def enqueue_many(self, queue, jobs, /, **options) -> list[int]:
        if self.kind == "sync":
            return queue.enqueue_many(jobs, **options)
        return asyncio.run(queue.enqueue_many_async(jobs, **options))

    def in_session(self, queue, calls: list[Call], *, commit: bool) -> list[int]:
        """`enqueue` each call with ``session=`` one session, then commit or roll back."""
        if self.kind == "sync":
            with Session(self.engine) as session:
                session.begin()
                ids = [queue.enqueue(*args, session=session, **kw) for args, kw in calls]
                (session.commit if commit else session.rollback)()
                return ids

        async def main() -> list[int]:
            engine = create_async_engine(async_url(self.url))
            try:
                async with AsyncSession(engine) as session:
                    await session.begin()
                    ids = [await queue.enqueue_async(*args, session=session, **kw) for args, kw in calls]
                    await (session.commit() if commit else session.rollback())
                    return ids
            finally:
                await engine.dispose()

        return asyncio.run(main())

    def in_connection(self, queue, jobs: list[dict], *, commit: bool) -> list[int]:
        """`enqueue_many` with ``connection=`` a Core connection, then commit or roll back."""
        if self.kind == "sync":
            with self.engine.connect() as conn:
                transaction = conn.begin()
                ids = queue.enqueue_many(jobs, connection=conn)
                (transaction.commit if commit else transaction.rollback)()
                return ids

        async def main() -> list[int]:
            engine = create_async_engine(async_url(self.url))
            try:
                async with engine.connect() as conn:
                    transaction = await conn.begin()
                    ids = await queue.enqueue_many_async(jobs, connection=conn)
                    await (transaction.commit() if commit else transaction.rollback())
                    return ids
            finally:
                await engine.dispose()

        return asyncio.run(main())
