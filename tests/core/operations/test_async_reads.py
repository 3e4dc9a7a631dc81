"""get_job_async, list_jobs_async and stats_async: the operator reads for asyncio code, on the
queue's asyncio engine or in the caller's AsyncSession, answering what the sync reads answer."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

import sqla_queue as sq



def register_tasks(queue: sq.Queue) -> sq.Queue:
    queue.task(lambda payload, ctx: None, name="send_email")
    queue.task(lambda payload, ctx: None, name="resize", queue="images")
    return queue


@pytest.fixture
def url_queue(database_url, clean_jobs) -> Iterator[sq.Queue]:
    q = register_tasks(sq.Queue(database_url, load_entrypoints=False))
    yield q
    asyncio.run(q.dispose_async())
    q.engine.dispose()


def test_async_reads_answer_what_the_sync_reads_answer(url_queue):
    first = url_queue.enqueue("send_email", {"to": "a@example.com"})
    second = url_queue.enqueue("resize", {"w": 10})

    async def reads() -> tuple[sq.JobView | None, sq.JobView | None, sq.JobPage, sq.JobPage, sq.QueueStats]:
        return (await url_queue.get_job_async(first), await url_queue.get_job_async(999),
                await url_queue.list_jobs_async(limit=1), await url_queue.list_jobs_async(queue="images"),
                await url_queue.stats_async(window=60))

    job, missing, page, images, stats = asyncio.run(reads())
    assert job == url_queue.get_job(first) and job.payload == {"to": "a@example.com"}
    assert missing is None
    assert ([j.id for j in page.jobs], page.next_before) == ([second], second)
    assert [j.id for j in images.jobs] == [second]
    assert (stats["default"].pending, stats["images"].pending) == (1, 1)


def test_async_reads_run_in_the_callers_session_and_see_its_uncommitted_job(database_url, clean_jobs):
    async_url = database_url.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = create_async_engine(async_url)
    queue = register_tasks(sq.Queue(engine, load_entrypoints=False))

    async def scenario() -> tuple[sq.JobView | None, int, int, sq.JobView | None]:
        async with AsyncSession(engine) as session:
            job_id = await queue.enqueue_async("send_email", {}, session=session)
            inside = await queue.get_job_async(job_id, session=session)
            page = await queue.list_jobs_async(session=session)
            stats = await queue.stats_async(session=session)
            await session.rollback()
        outside = await queue.get_job_async(job_id)
        await engine.dispose()
        return inside, len(page.jobs), stats["default"].pending, outside

    inside, listed, pending, outside = asyncio.run(scenario())
    assert inside is not None and inside.status == sq.JobStatus.PENDING
    assert (listed, pending, outside) == (1, 1, None)


def test_async_reads_refuse_bad_input_by_name(url_queue):
    with pytest.raises(sq.InvalidInputError, match="job_id"):
        asyncio.run(url_queue.get_job_async("seven"))  # type: ignore[arg-type]
    with pytest.raises(sq.InvalidInputError, match="window"):
        asyncio.run(url_queue.stats_async(window=-1))
    with pytest.raises(sq.InvalidInputError, match="status"):
        asyncio.run(url_queue.list_jobs_async(status="lost"))
