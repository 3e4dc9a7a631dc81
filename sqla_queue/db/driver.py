"""Core statements compiled once and run on the driver connection: the hot paths.

A busy worker runs one statement per round (complete the finished jobs, claim the next ones),
and an own-transaction enqueue is one INSERT. SQLAlchemy's per-execution work around them
(execution context, compiled-cache lookup, result metadata from the cursor description, row
processors) costs as much client CPU as the round trip itself, and a worker's claim loop is
CPU-bound on one core. So these statements are built and compiled by SQLAlchemy as usual, once
per engine dialect, and then handed straight to psycopg, which prepares them server-side after a
few executions like any other. Errors still come out as SQLAlchemy's `DBAPIError` (wrapped as
our `DatabaseError` by the caller), and a dropped connection is invalidated in the pool exactly
as SQLAlchemy would do it.
"""

from __future__ import annotations

import json
import re
from collections import namedtuple
from collections.abc import Callable, Sequence
from functools import cache, cached_property
from typing import Any

from sqlalchemy import Connection
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Dialect
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql import Select


class DriverStatement:
    """`statement` compiled for `dialect`; its rows are named tuples of its selected columns.

    Only for statements whose values need no SQLAlchemy type processing (plain numbers, text,
    dates, arrays of those; results the driver already decodes): the constructor refuses
    others. Parameters SQLAlchemy renders inline (``literal_execute``) give one SQL text per
    value, rendered by SQLAlchemy the first time that value is used. The statement's own
    constants (the values its builder wrote in, not the caller's parameters: statuses, the
    notification channel, bounds) are written into the SQL text as literals, so they are not
    sent again with every execution, and a generic plan sees them as a custom plan would. A
    constant of a type with no literal form stays a parameter. Parameters named in
    `binary` go in psycopg's binary format: its text form of an array quotes every element
    through a regular expression, which for a batch of JSON payloads costs more than the rest
    of the call.
    """

    def __init__(self, statement: Select, dialect: Dialect, sample: dict[str, Any],
                 *, binary: Sequence[str] = ()) -> None:
        self._statement = lambda: statement
        self._compiled = statement.compile(dialect=dialect)
        self._sample = sample
        self._binary = tuple(binary)
        self._inlined = tuple(sorted(
            bind.key for bind in self._compiled.literal_execute_params if bind.key in sample
        ))
        state = self._compiled.construct_expanded_state(sample)
        if state.processors:
            raise ValueError(f"parameters need SQLAlchemy processing: {sorted(state.processors)}")
        constants = {k: v for k, v in state.parameters.items() if k not in sample}
        self._literals = _literals(self._compiled, constants, dialect)
        self._constants = {k: v for k, v in constants.items() if k not in self._literals}
        self._texts: dict[tuple, str] = {}
        self._template: str | None = None
        self._markers: dict[str, int] = {}
        self._positional: dict[tuple, tuple[bytes, tuple[str, ...]]] = {}
        self._row = namedtuple("Row", [column.key for column in statement.selected_columns])  # type: ignore[misc]
        self._dialect = dialect
        self._dbapi_error = dialect.loaded_dbapi.Error
        self.sql(sample)  # fail now, not on first use, if a binary parameter is not where expected

    def saved(self) -> dict[str, Any] | None:
        """What `restored` needs to run this statement without compiling it, as JSON; None if
        a constant would not come back from JSON as the same value, or an inlined parameter is
        not an integer (`statement_cache`). Inlined integers (a claim's LIMIT) are kept as
        markers in one text, checked here to give SQLAlchemy's own text for two values."""
        names = sorted(set(self._inlined))
        if not all(_survives_json(value) for value in self._constants.values()) \
                or not all(type(self._sample[name]) is int for name in names):
            return None
        markers = {name: _MARKER + at for at, name in enumerate(names)}
        template = self.sql({**self._sample, **markers})
        other = {name: self._sample[name] + 7 for name in names}
        if any(_filled(template, markers, values) != self.sql({**self._sample, **values})
               for values in (self._sample, other)):
            return None
        return {"template": template, "markers": markers, "inlined": list(self._inlined),
                "literals": self._literals, "constants": self._constants, "columns": list(self._row._fields),
                "binary": list(self._binary)}

    @classmethod
    def restored(cls, saved: dict[str, Any], statement: Callable[[], Select], dialect: Dialect,
                 sample: dict[str, Any]) -> DriverStatement:
        """The statement `saved` describes, run without compiling; `statement` builds it should
        another inlined value need a text of its own."""
        self = cls.__new__(cls)
        self._statement = statement
        self._sample = sample
        self._binary = tuple(saved["binary"])
        self._inlined = tuple(saved["inlined"])
        self._literals = dict(saved["literals"])
        self._constants = dict(saved["constants"])
        self._template = saved["template"]
        self._markers = {name: int(marker) for name, marker in saved["markers"].items()}
        self._texts = {}
        self._positional = {}
        self._row = namedtuple("Row", saved["columns"])  # type: ignore[misc]
        self._dialect = dialect
        self._dbapi_error = dialect.loaded_dbapi.Error
        return self

    @cached_property
    def _compiled(self) -> Any:
        """Set by the constructor; a restored statement compiles only when an inlined value
        first needs a text of its own."""
        return self._statement().compile(dialect=self._dialect)

    @staticmethod
    def usable_on(dialect: Dialect) -> bool:
        return dialect.driver in ("psycopg", "psycopg_async")

    def sql(self, params: dict[str, Any]) -> str:
        """The SQL text for `params` (the same for all values but the inlined ones)."""
        key = tuple(params[name] for name in self._inlined)
        text = self._texts.get(key)
        if text is None:
            text = self._texts[key] = self._text_for(params)
        return text

    def _text_for(self, params: dict[str, Any]) -> str:
        if self._template is not None and all(type(params[name]) is int for name in self._markers):
            return _filled(self._template, self._markers, params)
        text = self._compiled.construct_expanded_state({**self._sample, **params}).statement
        for name, literal in self._literals.items():
            text = text.replace(f"%({name})s", literal)
        for name in self._binary:
            if text.count(f"%({name})s") != 1:
                raise ValueError(f"expected one %({name})s in the statement")
            text = text.replace(f"%({name})s", f"%({name})b")
        return text

    def rows(self, target: Connection | PoolProxiedConnection, params: dict[str, Any]) -> list[Any]:
        """Run on `target`'s DBAPI connection (a SQLAlchemy Connection or a pooled one): psycopg's
        own, or SQLAlchemy's adaptation of its asyncio connection (inside ``run_sync``)."""
        cursor = None
        try:
            cursor = self.execute(_dbapi_of(target), params)
            fetched = cursor.fetchall()
        except self._dbapi_error as exc:
            raise self.error(target, exc, self.sql(params)) from None
        finally:
            if cursor is not None:
                cursor.close()
        return self.made(fetched)

    def execute(self, dbapi: Any, params: dict[str, Any]) -> Any:
        """A cursor of `dbapi` (a psycopg connection, or SQLAlchemy's adaptation of an asyncio
        one) that has sent this statement with `params`.

        On a sync psycopg connection with psycopg's default cursors the statement goes with
        positional parameters (``RawCursor``, the same server-side binding): psycopg converts a
        ``%(name)s`` statement longer than 4 KiB (the round is 8 KiB, a limited claim 21 KiB)
        again on every execution; the positional text is made once per SQL text here. Its
        arrays go in binary where the connection allows it (`send_arrays_in_binary`). A
        connection whose owner chose other cursors (client-side binding, say) keeps them."""
        values = self.values(params)
        if self._binary or not _takes_positional(dbapi):
            cursor, query, sent = dbapi.cursor(), self.sql(params), values
        else:
            query, names = self._positional_text(params)
            cursor, sent = _psycopg().RawCursor(dbapi), [_in_binary(values[name]) for name in names]
        try:
            cursor.execute(query, sent)
        except BaseException:
            cursor.close()
            raise
        return cursor

    def _positional_text(self, params: dict[str, Any]) -> tuple[bytes, tuple[str, ...]]:
        key = tuple(params[name] for name in self._inlined)
        found = self._positional.get(key)
        if found is None:
            found = self._positional[key] = _positional(self.sql(params))
        return found

    def values(self, params: dict[str, Any]) -> dict[str, Any]:
        """The parameters psycopg is given for `params` (the statement's constants added)."""
        return {**self._constants, **params} if self._constants else params

    def made(self, fetched: list[Any]) -> list[Any]:
        """Driver rows as this statement's named tuples."""
        make = self._row._make
        return [make(row) for row in fetched]

    def error(self, target: Connection | PoolProxiedConnection, error: Exception,
              sql: str | None = None) -> sa_exc.DBAPIError:
        """`error` as SQLAlchemy would raise it (parameters hidden), with `target`'s connection
        invalidated if the error says it is gone."""
        invalidated = self._dialect.is_disconnect(error, _dbapi_of(target), None)
        if invalidated:
            target.invalidate(error)
        return sa_exc.DBAPIError.instance(
            sql or self.sql(self._sample), None, error, self._dbapi_error, hide_parameters=True,
            connection_invalidated=invalidated, dialect=self._dialect,
        )


_MARKER = 7_394_051_862
"""Stands for an inlined integer in a saved text (`DriverStatement.saved`); no statement has it."""


def _filled(template: str, markers: dict[str, int], values: dict[str, Any]) -> str:
    for name, marker in markers.items():
        template = template.replace(str(marker), str(values[name]))
    return template


def _survives_json(value: Any) -> bool:
    """`value` comes back from JSON as an equal value of the same type (what psycopg sends
    depends on the type: a tuple is not a list, an int subclass not an int)."""
    if type(value) is list:
        return all(_survives_json(item) for item in value)
    return value is None or type(value) in (str, int, float, bool)


def _literals(compiled: Any, constants: dict[str, Any], dialect: Dialect) -> dict[str, str]:
    """The SQL literal of each constant whose type has one (``NULL`` for None), as SQLAlchemy
    renders it for `dialect` (quotes escaped, ``%`` doubled for the ``%(name)s`` style)."""
    literals = {}
    for name, value in constants.items():
        bind = compiled.binds.get(name)
        if bind is None:
            continue
        if value is None:
            literals[name] = "NULL"
            continue
        render = bind.type.literal_processor(dialect)
        if render is not None and isinstance(value, (str, int)):
            literals[name] = render(value)
    return literals


_PLACEHOLDER = re.compile(r"%%|%\(([^)]+)\)s")


def _positional(text: str) -> tuple[bytes, tuple[str, ...]]:
    """`text` (psycopg's ``%(name)s`` style) with ``$1``, ``$2``... for its names, one number
    per name, and ``%`` for ``%%``; and the names in number order."""
    numbers: dict[str, int] = {}

    def placeholder(match: re.Match) -> str:
        name = match.group(1)
        if name is None:
            return "%"
        return f"${numbers.setdefault(name, len(numbers) + 1)}"

    return _PLACEHOLDER.sub(placeholder, text).encode(), tuple(numbers)


@cache
def _psycopg() -> Any:
    import psycopg

    return psycopg


class BinaryArray(list):
    """A list psycopg sends as a binary array on a connection that `send_arrays_in_binary` set
    up (elsewhere, as a list: text)."""


def send_arrays_in_binary(dbapi: Any) -> None:
    """`BinaryArray` parameters of `dbapi` (a psycopg connection) go in binary: the text form of
    an array quotes every element through a regular expression, half the cost of a round's
    parameters (its job ids, claim tokens and results). The statements cast each array
    parameter to its type, so the element type psycopg picks (int4 or int8, say) does not
    matter; a list of only None still goes as text (binary needs an element to type it)."""
    from psycopg.types.array import ListBinaryDumper

    dbapi.adapters.register_dumper(BinaryArray, ListBinaryDumper)


def _in_binary(value: Any) -> Any:
    return BinaryArray(value) if type(value) is list else value


def _takes_positional(dbapi: Any) -> bool:
    psycopg = _psycopg()
    return isinstance(dbapi, psycopg.Connection) and dbapi.cursor_factory is psycopg.Cursor


def _dbapi_of(target: Connection | PoolProxiedConnection) -> Any:
    if isinstance(target, Connection):
        return target.connection.dbapi_connection
    return target.dbapi_connection


def one_round_trip(target: Connection | PoolProxiedConnection,
                   steps: Sequence[tuple[DriverStatement, dict[str, Any]]]) -> list[list[Any]]:
    """Run `steps` in order as one transaction, sent together in psycopg's pipeline mode: one
    round trip in all (BEGIN, the statements, COMMIT) on a connection in autocommit, and each
    statement still takes its own snapshot when it starts. On a
    connection already in a transaction (not autocommit) the statements join it, and its owner
    commits. On an error nothing is committed: the transaction is rolled back. Each step's rows."""
    dbapi = _dbapi_of(target)
    own = bool(dbapi.autocommit)
    last = steps[-1][0]
    cursors = []
    try:
        with dbapi.pipeline():
            if own:
                dbapi.execute("BEGIN")
            for statement, params in steps:
                cursors.append(statement.execute(dbapi, params))
            if own:
                dbapi.execute("COMMIT")
        return [statement.made(cursor.fetchall()) for (statement, _), cursor in zip(steps, cursors)]
    except last._dbapi_error as exc:
        if own and not dbapi.closed:
            _roll_back(dbapi)
        raise last.error(target, exc) from None
    finally:
        for cursor in cursors:
            cursor.close()


def _roll_back(dbapi: Any) -> None:
    try:
        dbapi.execute("ROLLBACK")
    except Exception:  # a broken connection: its owner discards it
        pass


def decode_json_directly(dbapi: Any) -> None:
    """Rows of `dbapi` (a psycopg connection) decode their ``jsonb`` values (a claimed job's
    payload and meta) from text with the standard decoder, called directly: psycopg's own
    loader hands the bytes to ``json.loads``, which first works out their encoding, and the
    two took a tenth of a no-op job's worker CPU. Only where the connection decodes JSON the
    stock way, and in UTF-8 (what ``json.loads`` assumes of bytes): a ``json_deserializer`` the
    application gave its engine, psycopg's ``set_json_loads``, or another client encoding
    (``SQL_ASCII``, say) keeps psycopg's own loader."""
    from psycopg.pq import Format
    from psycopg.types.json import JsonbLoader

    oid = dbapi.adapters.types["jsonb"].oid
    stock = dbapi.adapters.get_loader(oid, Format.TEXT)
    if stock is not JsonbLoader or stock(oid, dbapi).loads is not json.loads or dbapi.info.encoding != "utf-8":
        return
    dbapi.adapters.register_loader(oid, _jsonb_text_loader())


@cache
def _jsonb_text_loader() -> type:
    from psycopg.adapt import Loader

    decode = json.JSONDecoder().raw_decode  # PostgreSQL writes jsonb with no surrounding blanks

    class JsonbTextLoader(Loader):
        def load(self, data: Any) -> Any:
            text = str(data, "utf-8")
            try:
                value, end = decode(text)
            except ValueError:
                end = -1
            return value if end == len(text) else json.loads(text)  # anything else: json's own verdict

    return JsonbTextLoader
