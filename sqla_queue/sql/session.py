"""Statements about the database session itself: what a pool runs on its connections.

They carry no user values, and run where SQLAlchemy has not wrapped the connection yet (pool
connect and checkout events, the listener's raw connection), so `constant_text` renders each
one to SQL text once, with its constants inline, for a driver to execute as it is.
"""

from __future__ import annotations

from sqlalchemy import func, literal, select
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.sql import Select


def default_isolation() -> Select:
    """The isolation level a transaction (or an autocommit statement) of this session gets."""
    return select(func.current_setting("default_transaction_isolation").label("level"))


def read_committed_by_default() -> Select:
    """Make this session's transactions READ COMMITTED unless they ask otherwise (session scope:
    ``set_config(..., false)``, kept once the surrounding transaction commits)."""
    return select(func.set_config("default_transaction_isolation", "read committed", False).label("level"))


def probe() -> Select:
    """A constant query: does the connection still answer?"""
    return select(literal(1).label("alive"))


def constant_text(statement: Select) -> str:
    """`statement` as PostgreSQL text with its constants inline (for the psycopg driver)."""
    return str(statement.compile(dialect=PGDialect_psycopg(), compile_kwargs={"literal_binds": True}))
