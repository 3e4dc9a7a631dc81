"""Statements about the database session itself: what a pool runs on its connections.

They carry no user values, and run where SQLAlchemy has not wrapped the connection yet (pool
connect and checkout events, the listener's raw connection), so `constant_text` renders each
one to SQL text once, with its constants inline, for a driver to execute as it is.
"""

from __future__ import annotations

from sqlalchemy import String, bindparam, func, literal, select
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.sql import Select


def default_isolation() -> Select:
    """The isolation level a transaction (or an autocommit statement) of this session gets."""
    return select(func.current_setting("default_transaction_isolation").label("level"))


def worker_session_defaults() -> Select:
    """A worker session's defaults (session scope: ``set_config(..., false)``, kept once the
    surrounding transaction commits). READ COMMITTED unless a transaction asks otherwise. Generic
    plans for its prepared statements: the round finds the jobs it completes by primary key, a
    plan that never wins PostgreSQL's custom-versus-generic comparison at small batches, so it
    would be planned afresh on every round; the claim and the outcomes are written so that
    their generic plans use the right index (tests/sql/test_claim_plan.py)."""
    return select(
        func.set_config("default_transaction_isolation", "read committed", False).label("level"),
        func.set_config("plan_cache_mode", "force_generic_plan", False).label("plans"),
    )


def set_application_name() -> Select:
    """Name the session in ``pg_stat_activity`` (the one statement here with a value, the name,
    a bound parameter: `parameterized_text`)."""
    return select(func.set_config("application_name", bindparam("name", type_=String), False).label("name"))


def parameterized_text(statement: Select) -> tuple[str, dict]:
    """`statement` as psycopg text and the parameters its constants need (add the values')."""
    compiled = statement.compile(dialect=PGDialect_psycopg())
    return str(compiled), {k: v for k, v in compiled.params.items() if v is not None}


def probe() -> Select:
    """A constant query: does the connection still answer?"""
    return select(literal(1).label("alive"))


def constant_text(statement: Select) -> str:
    """`statement` as PostgreSQL text with its constants inline (for the psycopg driver)."""
    return str(statement.compile(dialect=PGDialect_psycopg(), compile_kwargs={"literal_binds": True}))
