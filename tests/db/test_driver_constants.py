"""Compiled hot statements (`db.driver.DriverStatement`) carry their builder's constants in the
SQL text, as literals: only the caller's values travel as parameters with each execution."""

from __future__ import annotations

import re

from sqlalchemy import Integer, String, bindparam, literal, select

from sqla_queue.db.driver import DriverStatement
from sqla_queue.db.statements import DriverStatements, Statements
from sqla_queue.models import Job

ROUND_PARAMS = {"queues": ["default"], "tasks": None, "worker_id": "w", "limit": 3, "token": "t", "lease": None,
                "job_ids": [], "tokens": [], "results": []}


def _placeholders(sql: str) -> set[str]:
    return set(re.findall(r"%\((\w+)\)[sb]", sql))


def test_the_rounds_send_only_the_callers_values(engine):
    fast = DriverStatements(Statements.for_table(Job.__table__), engine.dialect)
    position = {"from_priority": [0], "from_run_at": [None], "from_id": [0]}

    round_sql = fast.round.sql(ROUND_PARAMS)
    from_sql = fast.round_from.sql({**ROUND_PARAMS, **position})

    assert _placeholders(round_sql) <= set(ROUND_PARAMS)
    assert _placeholders(from_sql) <= set(ROUND_PARAMS) | set(position)
    assert "'running'" in round_sql and "'completed'" in round_sql  # the statuses, as literals


def test_constants_are_rendered_as_literals_that_read_back_unchanged(engine):
    statement = select(
        literal("it's 100% 'quoted' \\ text", String).label("text"),
        literal(7999, Integer).label("number"),
        literal(None, String).label("nothing"),
        bindparam("given", type_=Integer).label("given"),
    )
    compiled = DriverStatement(statement, engine.dialect, {"given": 0})

    assert _placeholders(compiled.sql({"given": 1})) == {"given"}
    with engine.connect() as conn:
        [row] = compiled.rows(conn, {"given": 5})
    assert row == ("it's 100% 'quoted' \\ text", 7999, None, 5)


def test_a_statement_goes_with_positional_parameters_numbered_once_per_name(engine, monkeypatch):
    """On a sync psycopg connection the text is sent with ``$n`` placeholders (psycopg would
    convert a ``%(name)s`` text over 4 KiB again on every execution); a name used twice is one
    parameter, and a literal's ``%`` survives."""
    import psycopg

    statement = select(
        literal("100% sure", String).label("text"),
        (bindparam("n", type_=Integer) + bindparam("m", type_=Integer)).label("sum"),
        (bindparam("n", type_=Integer) * 2).label("twice"),
    )
    compiled = DriverStatement(statement, engine.dialect, {"n": 0, "m": 0})
    sent = []
    original = psycopg.RawCursor.execute

    def recording(self, query, params=None, **kwargs):
        sent.append((query, params))
        return original(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.RawCursor, "execute", recording)
    with engine.connect() as conn:
        [row] = compiled.rows(conn, {"n": 3, "m": 4})

    assert row == ("100% sure", 7, 6)
    [(query, params)] = sent
    assert re.findall(rb"\$\d+", query) == [b"$1", b"$2", b"$1"] and params == [3, 4]


def test_a_connection_with_cursors_of_its_owners_choice_keeps_them(database_url, monkeypatch):
    """An application engine made with psycopg's client-side binding cursors (a choice made for
    some poolers) is not switched to server-side binding by the fast path."""
    import psycopg
    from sqlalchemy import create_engine

    engine = create_engine(database_url, connect_args={"cursor_factory": psycopg.ClientCursor})
    statement = select(literal("100% sure", String).label("text"), bindparam("n", type_=Integer).label("n"))
    compiled = DriverStatement(statement, engine.dialect, {"n": 0})
    raw = []
    monkeypatch.setattr(psycopg.RawCursor, "execute", lambda self, *a, **k: raw.append(a))
    try:
        with engine.connect() as conn:
            [row] = compiled.rows(conn, {"n": 3})
    finally:
        engine.dispose()

    assert row == ("100% sure", 3) and raw == []
