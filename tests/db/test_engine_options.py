"""The dialect options of `make_engine` and `worker_engine`: their first connection skips the
dialect's hstore lookup (a query a fresh process's first enqueue or claim would wait for), and
HSTORE values still read and write."""

from __future__ import annotations

from sqlalchemy import literal, select
from sqlalchemy.dialects.postgresql import HSTORE

from sqla_queue.db.engine import make_async_engine, make_engine
from sqla_queue.db.worker_engine import worker_engine


def test_an_engine_from_a_url_leaves_hstore_to_sqlalchemy_and_still_reads_it(own_database):
    url, admin = own_database
    with admin.begin() as conn:
        conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS hstore")
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            value = conn.execute(select(literal({"a": "1", "b": None}, HSTORE))).scalar_one()
    finally:
        engine.dispose()
    assert (engine.dialect.use_native_hstore, engine.dialect._has_native_hstore) == (False, False)
    assert value == {"a": "1", "b": None}


def test_the_asyncio_engine_from_a_url_skips_the_lookup_too(database_url):
    engine = make_async_engine(database_url)
    assert engine.dialect.use_native_hstore is False


def test_the_workers_own_engine_skips_the_lookup_whatever_the_applications_engine_does(own_database):
    """A worker process sets up two dialects (the application's engine and its own): the
    worker's statements use no HSTORE, and a handler's values still read as above."""
    _, app_engine = own_database
    with app_engine.begin() as conn:
        conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS hstore")
    engine = worker_engine(app_engine, pool_size=1, call_timeout=10)
    try:
        with engine.connect() as conn:
            value = conn.execute(select(literal({"a": "1"}, HSTORE))).scalar_one()
    finally:
        engine.dispose()
    assert (engine.dialect.use_native_hstore, engine.dialect._has_native_hstore) == (False, False)
    assert value == {"a": "1"}
