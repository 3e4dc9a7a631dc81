"""Group keys: every way in stores the key on the job row; a bad key writes nothing."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from sqla_queue.errors import InvalidInputError

pytestmark = pytest.mark.usefixtures("clean_jobs")


def _keys(count_jobs, read_jobs) -> dict[int, str | None]:
    with read_jobs() as conn:
        return dict(conn.execute(text("SELECT id, group_key FROM sqla_queue_jobs ORDER BY id")).all())


def test_enqueue_and_enqueue_many_store_the_group_key(queue, count_jobs, read_jobs):
    one = queue.enqueue("send_email", {}, group_key="tenant-42")
    none = queue.enqueue("send_email", {})
    many = queue.enqueue_many([{"task": "send_email", "payload": {}, "group_key": "tenant-7"},
                               {"task": "send_email", "payload": {}},
                               {"task": "resize", "payload": {}, "group_key": "tenant-42", "priority": 3}])
    assert _keys(count_jobs, read_jobs) == {one: "tenant-42", none: None, many[0]: "tenant-7", many[1]: None,
                                             many[2]: "tenant-42"}
    assert queue.get_job(one).group_key == "tenant-42"


def test_the_asyncio_face_stores_the_group_key(engine, queue, read_jobs, count_jobs):
    async def main_() -> list[int]:
        async_engine = create_async_engine(
            make_url(engine.url).set(drivername="postgresql+psycopg_async").render_as_string(hide_password=False))
        try:
            async with AsyncSession(async_engine) as session, session.begin():
                first = await queue.enqueue_async("send_email", {}, group_key="a", session=session)
                rest = await queue.enqueue_many_async([{"task": "send_email", "payload": {}, "group_key": "b"}],
                                                      session=session)
                return [first, *rest]
        finally:
            await async_engine.dispose()

    ids = asyncio.run(main_())
    assert _keys(count_jobs, read_jobs) == {ids[0]: "a", ids[1]: "b"}


@pytest.mark.parametrize(("bad", "message"), [
    ("", "group_key must not be empty"),
    (42, "group_key must be a string, got int"),
    ("x" * 513, "group_key is 513 characters long; the limit is 512"),
    ("a\nb", "group_key contains control or non-printable characters"),
])
def test_a_bad_group_key_names_what_is_wrong_and_writes_nothing(queue, count_jobs, bad, message):
    with pytest.raises(InvalidInputError, match=message):
        queue.enqueue("send_email", {}, group_key=bad)
    with pytest.raises(InvalidInputError, match=rf"jobs\[1\]: {message}"):
        queue.enqueue_many([{"task": "send_email", "payload": {}},
                            {"task": "send_email", "payload": {}, "group_key": bad}])
    assert count_jobs() == 0
