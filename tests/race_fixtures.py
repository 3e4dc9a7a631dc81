"""Races need to commit from many connections at once: each such test gets a database of its
own (``fresh_url``), engines on it (``make_engine``) and a barrier to start threads together
(``race``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import create_engine, text

import sqla_queue as sq

THREADS = 8


@pytest.fixture
def fresh_url(create_database) -> str:
    return create_database()


@pytest.fixture
def make_engine(fresh_url):
    """Engines on this test's own database, disposed afterwards."""
    engines = []

    def make(**options: Any):
        engine = create_engine(fresh_url, pool_size=THREADS + 2, max_overflow=THREADS, **options)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.dispose()


@pytest.fixture
def new_queue():
    """Factory: a Queue on an engine, built-ins only, task ``send_email`` registered."""

    def build(engine, **options: Any) -> sq.Queue:
        queue = sq.Queue(engine, load_entrypoints=False, **options)
        queue.task(lambda payload, ctx: None, name="send_email")
        return queue

    return build


@pytest.fixture
def fresh_queue(make_engine, new_queue) -> sq.Queue:
    return new_queue(make_engine())


@pytest.fixture
def sql_scalar(fresh_url):
    engine = create_engine(fresh_url)

    def scalar(sql: str, **params: Any) -> Any:
        with engine.connect() as conn:
            return conn.execute(text(sql), params).scalar_one()

    yield scalar
    engine.dispose()


@pytest.fixture
def race():
    """`run_together`, for tests."""
    return run_together


def run_together(target: Callable[[int], Any], threads: int = THREADS) -> list[Any]:
    """Run ``target(i)`` in `threads` threads released at once by a Barrier; return results.

    An exception in any thread is re-raised here, after every thread has finished.
    """
    barrier = threading.Barrier(threads)
    results: list[Any] = [None] * threads
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=60)
            results[i] = target(i)
        except BaseException as exc:  # noqa: BLE001 - reported to the test below
            errors.append(exc)
            barrier.abort()

    workers = [threading.Thread(target=run, args=(i,), name=f"race-{i}") for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    assert not any(worker.is_alive() for worker in workers), "a racing thread never finished"
    if errors:
        raise errors[0]
    return results
