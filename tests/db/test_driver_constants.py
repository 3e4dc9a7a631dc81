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
