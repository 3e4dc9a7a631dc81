"""What the worker's connections change in psycopg's adaptation: they decode ``jsonb`` with the
JSON decoder called directly (`driver.decode_json_directly`: the same values as psycopg's own
loader, and an application's own ``json_deserializer`` or psycopg's ``set_json_loads`` still
wins), and send the driver statements' arrays in binary (`driver.send_arrays_in_binary`: the
same values arrive as in text)."""

from __future__ import annotations

import json

import psycopg
from psycopg.adapt import PyFormat, Transformer
from sqlalchemy import create_engine

import sqla_queue as sq
from sqla_queue.db.driver import BinaryArray, _in_binary, decode_json_directly, send_arrays_in_binary
from sqla_queue.db.worker_engine import worker_engine

VALUES = ("""'{"a": [1, 2.5, -3e-7, "é ✓", null, true, {"b": "\\\\u0000-free"}]}'::jsonb, '"x"'::jsonb, """
          """null::jsonb, '3'::jsonb, '[]'::jsonb""")


def _rows(conn: psycopg.Connection) -> tuple:
    return conn.execute(f"SELECT {VALUES}").fetchone()


def test_the_direct_decoder_reads_what_psycopgs_own_loader_reads(database_url):
    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        stock = _rows(conn)
        decode_json_directly(conn)
        direct = _rows(conn)
        loader = conn.adapters.get_loader(conn.adapters.types["jsonb"].oid, psycopg.pq.Format.TEXT)
    assert direct == stock
    assert loader.__name__ == "JsonbTextLoader"


def test_a_worker_connection_decodes_directly(own_database):
    _, app_engine = own_database
    engine = worker_engine(app_engine, pool_size=1, call_timeout=10)
    try:
        with engine.connect() as conn:
            dbapi = conn.connection.dbapi_connection
            loader = dbapi.adapters.get_loader(dbapi.adapters.types["jsonb"].oid, psycopg.pq.Format.TEXT)
    finally:
        engine.dispose()
    assert loader.__name__ == "JsonbTextLoader"


def test_the_applications_json_deserializer_still_decodes_what_the_worker_claims(own_database):
    """A deserializer given to the application's engine reaches the worker's connections (they
    are made like the application's): the handler gets the payload it made."""
    url, _ = own_database

    def tagged(text):
        value = json.loads(text)
        return {**value, "decoded_by": "the app"} if isinstance(value, dict) else value

    app_engine = create_engine(url, json_deserializer=tagged)
    queue = sq.Queue(app_engine, load_entrypoints=False)
    seen = []

    @queue.task(name="record")
    def record(payload, ctx):
        seen.append(payload)

    try:
        queue.enqueue("record", {"n": 1})
        summary = queue.worker(concurrency=1, poll_interval=0.05).run(until_empty=True)
    finally:
        app_engine.dispose()
    assert summary.completed == 1
    assert seen == [{"n": 1, "decoded_by": "the app"}]


def test_another_client_encoding_keeps_psycopgs_loader(database_url):
    """Only a UTF-8 connection changes: elsewhere psycopg's loader (``json.loads`` of the bytes,
    read as UTF-8 whatever the client encoding) goes on reading what it read before."""
    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, client_encoding="SQL_ASCII") as conn:
        decode_json_directly(conn)
        loader = conn.adapters.get_loader(conn.adapters.types["jsonb"].oid, psycopg.pq.Format.TEXT)
        value = conn.execute("SELECT '{\"name\": \"\\u00e9 \\u2713\"}'::jsonb").fetchone()[0]  # ASCII text
    assert loader is psycopg.types.json.JsonbLoader
    assert value == {"name": "é ✓"}


def test_psycopgs_own_json_loads_setting_is_left_in_place(database_url):
    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        psycopg.types.json.set_json_loads(lambda data: "custom", conn)
        decode_json_directly(conn)
        assert conn.execute("SELECT '{}'::jsonb").fetchone() == ("custom",)


ARRAYS = [[1, 2, 2**40], ["tok-1", 'quo"te', "{brace},comma", "é ✓", "NULL", ""], [None, "x", None], [None], [],
          [3.5, None]]
ARRAY_SQL = "SELECT $1::BIGINT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::BIGINT[], $6::FLOAT8[]"


def test_arrays_sent_in_binary_arrive_as_they_do_in_text(database_url):
    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        as_text = psycopg.RawCursor(conn).execute(ARRAY_SQL, ARRAYS).fetchone()
        send_arrays_in_binary(conn)
        sent = [_in_binary(value) for value in ARRAYS]
        as_binary = psycopg.RawCursor(conn).execute(ARRAY_SQL, sent).fetchone()
        transformer = Transformer(conn)
        transformer.dump_sequence(sent, [PyFormat.AUTO] * len(sent))
    assert as_binary == as_text == tuple(ARRAYS)
    assert [f.name for f in transformer.formats] == ["BINARY", "BINARY", "BINARY", "TEXT", "TEXT", "BINARY"]


def test_only_a_worker_connection_sends_them_in_binary(own_database):
    _, app_engine = own_database
    engine = worker_engine(app_engine, pool_size=1, call_timeout=10)
    formats = {}
    try:
        for name, source in (("worker", engine), ("application", app_engine)):
            with source.connect() as conn:
                transformer = Transformer(conn.connection.dbapi_connection)
                transformer.dump_sequence([BinaryArray([1, 2])], [PyFormat.AUTO])
                formats[name] = transformer.formats[0].name
    finally:
        engine.dispose()
    assert formats == {"worker": "BINARY", "application": "TEXT"}
