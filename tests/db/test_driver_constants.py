"""Compiled hot statements (`db.driver.DriverStatement`) carry their builder's constants in the
SQL text, as literals: only the caller's values travel as parameters with each execution."""

from __future__ import annotations

import re

from sqlalchemy import Integer, String, bindparam, func, literal, select

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


def test_a_statement_goes_with_positional_parameters_numbered_once_per_name(engine):
    """On a sync psycopg connection the fast path numbers the placeholders itself (psycopg would
    convert a ``%(name)s`` text over 4 KiB again on every execution): a name used twice is one
    parameter, and a literal's ``%`` survives. The server says what it received
    (``current_query()``)."""
    statement = select(
        literal("100% sure", String).label("text"),
        (bindparam("n", type_=Integer) + bindparam("m", type_=Integer)).label("sum"),
        (bindparam("n", type_=Integer) * 2).label("twice"),
        func.current_query().label("received"),
    )
    compiled = DriverStatement(statement, engine.dialect, {"n": 0, "m": 0})
    with engine.connect() as conn:
        [row] = compiled.rows(conn, {"n": 3, "m": 4})

    assert row[:3] == ("100% sure", 7, 6)
    assert re.findall(r"\$\d+", row.received) == ["$1", "$2", "$1"] and "%(" not in row.received


def test_a_connection_with_cursors_of_its_owners_choice_keeps_them(database_url):
    """An application engine made with psycopg's client-side binding cursors (a choice made for
    some poolers) is not switched to server-side binding by the fast path: the server receives
    the values in the text, no placeholder."""
    import psycopg
    from sqlalchemy import create_engine

    engine = create_engine(database_url, connect_args={"cursor_factory": psycopg.ClientCursor})
    statement = select(bindparam("n", type_=Integer).label("n"), func.current_query().label("received"))
    compiled = DriverStatement(statement, engine.dialect, {"n": 0})
    try:
        with engine.connect() as conn:
            [row] = compiled.rows(conn, {"n": 31337})
    finally:
        engine.dispose()

    assert row.n == 31337 and "31337" in row.received and "$1" not in row.received
