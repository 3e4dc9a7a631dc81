"""A Core statement compiled once and run on the driver connection: the worker's per-round path.

A busy worker runs one statement per round (complete the finished jobs, claim the next ones).
SQLAlchemy's per-execution work around it (execution context, compiled-cache lookup, result
metadata from the cursor description, row processors) cost more client CPU than the round trip
itself, and a worker's claim loop is CPU-bound on one core. So this statement is built and
compiled by SQLAlchemy as usual, once per engine dialect, and then handed straight to psycopg,
which prepares it server-side after a few executions like any other. Errors still come out as
SQLAlchemy's `DBAPIError` (wrapped as our `DatabaseError` by the caller), and a dropped connection
is invalidated in the pool exactly as SQLAlchemy would do it.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

from sqlalchemy import Connection, exc as sa_exc
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import Select


class DriverStatement:
    """`statement` compiled for `dialect`; its rows are named tuples of its selected columns.

    Only for statements whose values need no SQLAlchemy type processing (plain numbers, text,
    arrays of those; the results the driver already decodes): the constructor refuses others.
    Parameters SQLAlchemy renders inline (``literal_execute``) give one SQL text per value,
    rendered by SQLAlchemy the first time that value is used.
    """

    def __init__(self, statement: Select, dialect: Dialect, sample: dict[str, Any]) -> None:
        self._compiled = statement.compile(dialect=dialect)
        self._sample = sample
        self._inlined = tuple(sorted(
            bind.key for bind in self._compiled.literal_execute_params if bind.key in sample
        ))
        state = self._compiled.construct_expanded_state(sample)
        if state.processors:
            raise ValueError(f"parameters need SQLAlchemy processing: {sorted(state.processors)}")
        self._constants = {k: v for k, v in state.parameters.items() if k not in sample}
        self._texts: dict[tuple, str] = {}
        self._row = namedtuple("Row", [column.key for column in statement.selected_columns])  # type: ignore[misc]
        self._dbapi_error = dialect.loaded_dbapi.Error

    @staticmethod
    def usable_on(dialect: Dialect) -> bool:
        return dialect.driver == "psycopg"

    def sql(self, params: dict[str, Any]) -> str:
        """The SQL text for `params` (the same for all values but the inlined ones)."""
        key = tuple(params[name] for name in self._inlined)
        text = self._texts.get(key)
        if text is None:
            text = self._compiled.construct_expanded_state({**self._sample, **params}).statement
            self._texts[key] = text
        return text

    def rows(self, conn: Connection, params: dict[str, Any]) -> list[Any]:
        driver = conn.connection.driver_connection
        sql = self.sql(params)
        try:
            fetched = driver.execute(sql, {**self._constants, **params}).fetchall()
        except self._dbapi_error as exc:
            raise self._wrapped(conn, driver, sql, exc) from None
        make = self._row._make
        return [make(row) for row in fetched]

    def _wrapped(self, conn: Connection, driver: Any, sql: str, error: Exception) -> sa_exc.DBAPIError:
        invalidated = conn.dialect.is_disconnect(error, driver, None)
        if invalidated:
            conn.invalidate(error)
        return sa_exc.DBAPIError.instance(
            sql, None, error, self._dbapi_error, hide_parameters=True,
            connection_invalidated=invalidated, dialect=conn.dialect,
        )
