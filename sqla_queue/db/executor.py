"""The one place sqla_queue runs SQL: engines, transaction modes, deadlines, statements.

A private seam between what the code wants done (the facade, operations, pruning, doctor, the
listener) and how a statement reaches PostgreSQL. Its clients use only this interface
(internal, not public API; anything else here is private):

- ``Executor.adopt(engine_or_url, table)``: the executor of a `Queue`; a URL gets engines of
  ours (`_engine.make_engine`, and `make_async_engine` on first asyncio use), an Engine or
  AsyncEngine is used as the application built it.
- ``executor.on_engine(engine, *, call_timeout=None)``: the same statements on another engine
  (a worker's, the CLI's), its capabilities looked up once here.
- ``executor.table``, ``.engine`` (our READ COMMITTED, parameters-hidden view), ``.dialect``,
  ``.capabilities`` (`Capabilities`), ``.call_timeout`` (client-side deadline, seconds or
  None), ``.statements`` (`Statements`: every Core statement of the table, built once per
  table and shared by every executor on it).
- Transaction modes, each a context manager yielding a SQLAlchemy ``Connection`` inside the
  call deadline, driver errors re-raised as `DatabaseError`:
  ``transaction()`` (our own short READ COMMITTED transaction, committed on exit),
  ``connection()`` (no transaction of ours: reads), ``single_statement()`` (one self-contained
  statement: autocommit where the engine allows, else our own transaction) and
  ``callers(session, connection)`` (the caller's transaction, never committed by us; our own
  if neither is given).
- ``run_round(conn, params)``: the worker's complete-and-claim statement, on the driver fast
  path where the engine allows; ``round_connection()``, the connection its rounds run on (kept
  from round to round on a worker engine) and ``close_round_connection()``, its end.
- ``autocommit_enqueue()``: a context manager yielding ``(pooled connection, DriverStatements)``
  in autocommit for an enqueue that is all its call writes, or None where that is not safe.
- ``listening(call_timeout, listen=None)`` and ``probe(driver, call_timeout)``: the listener's
  connection (LISTENing on the table's channel, or on `listen`'s) and its liveness check;
  ``listening_async(listen)``, the same on the queue's asyncio engine (`Queue.wait_async`).

- The asyncio face: ``await run_async(work, session, connection)`` runs ``work(conn, fast)`` --
  the same synchronous code the modes above serve -- on an asyncio connection through
  SQLAlchemy's ``run_sync`` (a greenlet in which each statement awaits the driver): the
  caller's `AsyncSession` or `AsyncConnection`, or our own READ COMMITTED transaction on the
  queue's asyncio engine, with the compiled statements (`fast`) only there. ``sync_refused``:
  the queue was built from an AsyncEngine, whose own synchronous modes are refused (``engine``
  is then a psycopg engine on its URL, for the worker and the command line via ``on_engine``).

Which path runs is decided from `Capabilities` recorded when the engine was adopted, never by
inspecting the engine afterwards. Everything above the connection (statements, capabilities,
parameters) is free of I/O style, which is what lets both faces share it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, Engine, Table
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Dialect
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql.expression import Executable

from ..errors import ConfigurationError, InvalidInputError
from ..sql.claim import DEFAULT_ORDER, ClaimOrder
from . import kinds
from .asyncio import AsyncSide
from .deadline import deadline, driver_deadline
from .driver import one_round_trip
from .engine import (
    PROBE,
    Capabilities,
    autocommit_checkout,
    autocommit_reads_committed,
    capabilities_of,
    database_errors,
    has_pending_input,
    library_engine,
    make_engine,
)
from .statement_cache import StatementCache
from .statements import ARRAY_PARAMS, DriverStatements, Statements
from .worker_engine import WORKER_PING_IF_IDLE_FOR

if TYPE_CHECKING:  # the ORM and asyncio extension are imported by whoever uses them (`kinds`)
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
    from sqlalchemy.orm import Session

__all__ = ["ARRAY_PARAMS", "Capabilities", "DriverStatements", "Executor", "Statements"]

T = TypeVar("T")

_REFUSED_ON_ASYNC_ENGINE = (
    "this Queue was built from an AsyncEngine, so it runs only asyncio calls: use enqueue_async "
    "or enqueue_many_async, or build the Queue from a database URL (it serves both) or a "
    "synchronous Engine for synchronous calls"
)
_NO_ASYNC_ENGINE = (
    "this Queue was built from a synchronous Engine and has no asyncio engine of its own: pass "
    "session=AsyncSession or connection=AsyncConnection, or build the Queue from a database URL "
    "(it serves both) or an AsyncEngine"
)



class Executor:
    """Runs `statements` on one engine with the modes its `capabilities` allow (module docs)."""

    def __init__(self, engine: Engine, table: Table, capabilities: Capabilities,
                 *, call_timeout: float | None = None, async_side: AsyncSide | None = None,
                 sync_refused: str | None = None, order: ClaimOrder = DEFAULT_ORDER) -> None:
        self.engine = library_engine(engine)
        self.table = table
        self.order = order
        self.capabilities = capabilities
        self.call_timeout = call_timeout
        self.statements = Statements.for_table(table, order)
        # Connections of a worker engine are autocommit already; the READ COMMITTED view would
        # wrap each statement in BEGIN/COMMIT again.
        self._autocommit_engine = engine if capabilities.autocommit_single_statements else None
        self._asyncio = async_side
        self._sync_refused = sync_refused
        # The worker's round connection (`round_connection`): kept while rounds succeed.
        self._round_lock = threading.Lock()
        self._round_conn: Connection | None = None
        self._round_used_at = 0.0

    @classmethod
    def adopt(cls, engine_or_url: Engine | AsyncEngine | str, table: Table,
              order: ClaimOrder = DEFAULT_ORDER) -> Executor:
        """A URL serves both faces (an engine of ours for each, the asyncio one made on first
        use); an Engine the synchronous one, an AsyncEngine the asyncio one. `order` is the
        claim's (`sql.claim.ClaimOrder`)."""
        if isinstance(engine_or_url, str):
            engine = make_engine(engine_or_url)
            return cls(engine, table, capabilities_of(engine),
                       async_side=AsyncSide(table, url=engine.url, order=order), order=order)
        if kinds.is_async_engine(engine_or_url):
            # The synchronous engine on its URL is for the worker and the command line, which
            # connect themselves (`on_engine`); this queue's own synchronous calls are refused.
            side = AsyncSide(table, engine=engine_or_url, order=order)
            twin = make_engine(engine_or_url.url)
            return cls(twin, table, capabilities_of(twin), async_side=side, sync_refused=_REFUSED_ON_ASYNC_ENGINE,
                       order=order)
        if not isinstance(engine_or_url, Engine):
            library_engine(engine_or_url)  # raises the ConfigurationError naming what it got
        return cls(engine_or_url, table, capabilities_of(engine_or_url), order=order)

    def on_engine(self, engine: Engine, *, call_timeout: float | None = None) -> Executor:
        """The asyncio engine comes along when `engine` reaches the same database: the handler
        transactions of a worker's async handlers (`asyncio_engine`) run there."""
        side = self._asyncio if self._asyncio is not None and self._asyncio.reaches(engine.url) else None
        return Executor(engine, self.table, capabilities_of(engine), call_timeout=call_timeout, async_side=side,
                        order=self.order)

    def asyncio_engine(self) -> AsyncEngine | None:
        """The queue's asyncio engine (made from its URL on first use), None for a queue built
        from an Engine: where ``async with ctx.transaction()`` opens its session by default."""
        return None if self._asyncio is None else self._asyncio.engine

    def made_asyncio_engine(self) -> AsyncEngine | None:
        """The asyncio engine this queue made from its URL, if it made one yet: what there is to
        dispose (asking `asyncio_engine` would make one only to close it)."""
        return self._asyncio.engine if self._asyncio is not None and self._asyncio.made else None

    @property
    def asyncio_engine_missing(self) -> bool:
        """True for a queue built from a synchronous Engine: no asyncio engine of its own."""
        return self._asyncio is None

    @property
    def sync_refused(self) -> bool:
        """True for a queue built from an AsyncEngine: its synchronous calls are refused (the
        command line runs them `on_engine(engine)`, connected like its worker)."""
        return self._sync_refused is not None

    def _sync_engine(self) -> Engine:
        """The engine of the synchronous modes; a queue built from an AsyncEngine refuses them
        (its ``engine`` is a psycopg engine on the same URL, which the worker and the command
        line connect like: the AsyncEngine's ``connect_args`` and hooks do not carry over)."""
        if self._sync_refused is not None:
            raise ConfigurationError(self._sync_refused)
        return self.engine

    @property
    def dialect(self) -> Dialect:
        return self.engine.dialect

    # -- the asyncio face ------------------------------------------------------------------

    async def dispose_async(self) -> None:
        """Close the pooled connections of the asyncio engine made from the queue's URL."""
        if self._asyncio is not None:
            await self._asyncio.dispose()

    async def run_async(self, work: Callable[[Connection, DriverStatements | None], T],
                        session: AsyncSession | None, connection: AsyncConnection | None) -> T:
        """``work(conn, fast)``, the same synchronous code the synchronous API runs, on an
        asyncio connection: the caller's (its transaction; we never commit it), or our own READ
        COMMITTED transaction on the queue's asyncio engine. SQLAlchemy's ``run_sync`` runs it
        in a greenlet, where every statement on `conn` awaits the driver: one statement per
        operation, whichever face calls it. `fast` (the compiled hot statements) is given only
        on our own connection, as in the synchronous face."""
        _check_async_callers(session, connection)
        if kinds.is_async_scoped_session(session):
            session = session()  # the AsyncSession of the current scope
        if session is not None:
            return await session.run_sync(lambda sync_session: work(sync_session.connection(), None))
        if connection is not None:
            return await connection.run_sync(work, None)
        side = self._asyncio
        if side is None:
            raise ConfigurationError(_NO_ASYNC_ENGINE)
        with database_errors():
            async with side.engine.connect() as conn:
                return await conn.run_sync(_in_transaction, work, side.driver_statements)

    @cached_property
    def _driver_statements(self) -> DriverStatements | None:
        return DriverStatements(self.statements, self.dialect, StatementCache.configured()) if self.capabilities.driver_fast_path else None

    # -- transaction modes -----------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """Our own short transaction, committed on exit, inside the call deadline if any."""
        with self.connection() as conn, conn.begin():
            yield conn

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        with self._connected(self._sync_engine()) as conn:
            yield conn

    @contextmanager
    def single_statement(self) -> Iterator[Connection]:
        """For one self-contained statement: autocommit on a `worker_engine` connection whose
        session reads committed in autocommit (one round trip), our own transaction anywhere
        else (a session defaulting to another isolation level behind PgBouncer, say)."""
        if self._autocommit_engine is not None:
            with self._connected(self._autocommit_engine) as conn:
                if autocommit_reads_committed(conn):
                    yield conn
                    return
        with self.transaction() as conn:
            yield conn

    @contextmanager
    def callers(self, session: Session | None, connection: Connection | None) -> Iterator[Connection]:
        """The caller's connection (its transaction; we never commit it), or our own
        transaction when the caller gave neither."""
        _check_sync_callers(session, connection)
        if session is not None:
            yield session.connection()
        elif connection is not None:
            yield connection
        else:
            with self.transaction() as conn:
                yield conn

    @contextmanager
    def _connected(self, engine: Engine) -> Iterator[Connection]:
        with database_errors(), engine.connect() as conn, deadline(conn, self.call_timeout):
            yield conn

    # -- the worker's round connection ------------------------------------------------------

    @contextmanager
    def round_connection(self) -> Iterator[Connection]:
        """`single_statement` for the claim loop's rounds, on one connection kept from round to
        round on a worker engine: a checkout and check-in per round cost as much client CPU as
        a job. Any error in a round discards it (invalidated: its state is unknown) and the next
        round connects afresh; before reuse, one the server spoke to, or that rested long, is
        pinged as the pool would at checkout. On any other engine, or while another thread
        uses it, this is `single_statement`. `close_round_connection` gives it back."""
        if self._autocommit_engine is None or not self._round_lock.acquire(blocking=False):
            with self.single_statement() as conn:
                yield conn
            return
        try:
            conn = self._kept_round_connection()
            try:
                with database_errors(), deadline(conn, self.call_timeout):
                    if autocommit_reads_committed(conn):
                        yield conn
                        if conn.in_transaction():
                            conn.commit()  # SQLAlchemy's own bookkeeping: in autocommit, nothing is sent
                    else:
                        with conn.begin():
                            yield conn
            except BaseException:
                self._discard_round_connection()
                raise
            self._round_used_at = time.monotonic()
        finally:
            self._round_lock.release()

    def close_round_connection(self) -> None:
        """Give the kept round connection back to the pool (the worker, when it stops)."""
        with self._round_lock:
            conn, self._round_conn = self._round_conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # a broken connection is the pool's to discard
                pass

    def _kept_round_connection(self) -> Connection:
        conn = self._round_conn
        if conn is not None and (conn.invalidated or conn.closed or not self._still_answers(conn)):
            self._discard_round_connection()
            conn = None
        if conn is None:
            with database_errors():
                conn = self._round_conn = self._autocommit_engine.connect()  # type: ignore[union-attr]
            self._round_used_at = time.monotonic()
        return conn

    def _still_answers(self, conn: Connection) -> bool:
        """The worker engine's checkout ping for a connection that never went back to the pool:
        only when the server sent it something (a restart, a terminated backend) or it rested."""
        driver = conn.connection.driver_connection
        rested = time.monotonic() - self._round_used_at >= WORKER_PING_IF_IDLE_FOR
        if not rested and not has_pending_input(driver):
            return True
        try:
            self.probe(driver, self.call_timeout)
        except Exception:
            return False
        return True

    def _discard_round_connection(self) -> None:
        conn, self._round_conn = self._round_conn, None
        if conn is None:
            return
        try:
            if not conn.invalidated:
                conn.invalidate()
            conn.close()
        except Exception:  # discarding what is broken already
            pass

    # -- the driver fast path --------------------------------------------------------------

    def run_round(self, conn: Connection, params: dict[str, Any], *, from_position: bool = False) -> list[Any]:
        """The complete-and-claim statement's rows (attributes as the statement names them),
        claiming from ``params``' position or from the start of the claim order."""
        fast = self._driver_statements
        if fast is not None:
            return (fast.round_from if from_position else fast.round).rows(conn, params)
        statement = self.statements.complete_and_claim_from if from_position else self.statements.complete_and_claim
        return conn.execute(statement, params).all()

    def complete_many(self, conn: Connection, params: dict[str, Any]) -> list[Any]:
        """The rows of `Statements.complete_many` (a worker's flush, `Queue.complete_many`), on
        the driver fast path where there is one: SQLAlchemy's per-row result processing costs
        more than the statement for a batch of hundreds."""
        fast = self._driver_statements
        if fast is not None:
            return fast.complete_many.rows(conn, params)
        return conn.execute(self.statements.complete_many, params).all()

    def one_round_trip(self, steps: Callable[[DriverStatements], Sequence[tuple[Any, dict[str, Any]]]]
                       ) -> list[list[Any]] | None:
        """The rows of each of `steps` (built from the compiled statements), run as one
        transaction sent in one round trip on the round connection (`driver.one_round_trip`);
        None, running nothing, when the driver has no fast path."""
        fast = self._driver_statements
        if fast is None:
            return None
        with self.round_connection() as conn:
            return one_round_trip(conn, steps(fast))

    def compiled(self, statements: Callable[[DriverStatements], Sequence[tuple[Any, dict[str, Any]]]]) -> list[Any] | None:
        """The compiled statements `statements` names (compiling them if first used), run
        nothing; None without the driver fast path."""
        fast = self._driver_statements
        return None if fast is None else [statement for statement, _ in statements(fast)]

    @contextmanager
    def autocommit_enqueue(self) -> Iterator[tuple[PoolProxiedConnection, DriverStatements] | None]:
        """A pooled connection in autocommit and the compiled enqueue statements, inside the
        call deadline; None (nothing held) where the engine is not ours or this connection's
        session does not default to READ COMMITTED. Errors come out as `DatabaseError`. The
        connection stays in autocommit in the pool (`engine.autocommit_checkout`): the next
        enqueue switches nothing, and any other checkout leaves autocommit first."""
        fast = self._driver_statements if self.capabilities.autocommit_enqueue and self._sync_refused is None else None
        if fast is None:
            yield None
            return
        with database_errors():
            pooled = self._raw_connection()
            try:
                if not autocommit_reads_committed(pooled):
                    yield None
                    return
                with driver_deadline(pooled.driver_connection, self.call_timeout):
                    yield pooled, fast
            finally:
                pooled.close()

    def _raw_connection(self) -> PoolProxiedConnection:
        """A pooled connection in autocommit; failing to connect raises what a `Connection`
        would raise (the pool hands back the driver's own error), so `database_errors` reports
        it, and so does failing to switch to autocommit."""
        dbapi_error = self.dialect.loaded_dbapi.Error
        try:
            return autocommit_checkout(self.engine)
        except dbapi_error as exc:
            raise sa_exc.DBAPIError.instance(
                None, None, exc, dbapi_error, hide_parameters=True, dialect=self.dialect
            ) from None

    # -- the listener's connection ---------------------------------------------------------

    @contextmanager
    def listening(self, call_timeout: float | None, listen: Executable | None = None) -> Iterator[Any]:
        """A connection of its own in autocommit, LISTENing on the table's channel (enqueues;
        `listen`, e.g. ``statements.listen_finished``, for another); yields its driver
        connection (for ``notifies()``). LISTEN runs under `call_timeout`; the wait for
        notifications does not. The connection is closed afterwards, not pooled: it would go on
        LISTENing and collecting notifications for whoever checked it out next."""
        with self.engine.connect() as conn:
            try:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                with deadline(conn, call_timeout):
                    conn.execute(self.statements.listen if listen is None else listen)
                yield conn.connection.driver_connection
            finally:
                conn.invalidate()

    @asynccontextmanager
    async def listening_async(self, listen: Executable) -> AsyncIterator[Any]:
        """`listening` on the queue's asyncio engine: yields psycopg's asyncio connection, whose
        ``notifies()`` is awaited on the event loop. Closed afterwards, never pooled."""
        side = self._asyncio
        if side is None:
            raise ConfigurationError(_NO_ASYNC_ENGINE)
        with database_errors():
            async with side.engine.connect() as conn:
                try:
                    conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                    await conn.execute(listen)
                    yield (await conn.get_raw_connection()).driver_connection
                finally:
                    await conn.invalidate()

    @staticmethod
    def probe(driver_connection: Any, call_timeout: float | None) -> None:
        """A constant query on a raw driver connection: raises if it no longer answers."""
        with driver_deadline(driver_connection, call_timeout):
            driver_connection.execute(PROBE)


def _check_sync_callers(session: Any, connection: Any) -> None:
    if session is not None and connection is not None:
        raise InvalidInputError("pass session or connection, not both")
    if kinds.is_async_session(session) or kinds.is_async_connection(connection):
        given = "session=AsyncSession" if kinds.is_async_session(session) else "connection=AsyncConnection"
        raise InvalidInputError(
            f"{given} needs the asyncio method: await queue.enqueue_async(...) or "
            "enqueue_many_async(...)"
        )
    if session is not None and not kinds.is_session(session):
        raise InvalidInputError(f"session= must be a sqlalchemy Session, got {type(session).__name__}")
    if connection is not None and not isinstance(connection, Connection):
        raise InvalidInputError(f"connection= must be a sqlalchemy Connection, got {type(connection).__name__}")


def _check_async_callers(session: Any, connection: Any) -> None:
    if session is not None and connection is not None:
        raise InvalidInputError("pass session or connection, not both")
    if session is not None and not kinds.is_async_session(session):
        raise InvalidInputError(
            f"session= of an asyncio call must be an AsyncSession, got {type(session).__name__}"
            + ("; with a Session, call the synchronous method (enqueue, enqueue_many)"
               if kinds.is_session(session) else "")
        )
    if connection is not None and not kinds.is_async_connection(connection):
        raise InvalidInputError(
            f"connection= of an asyncio call must be an AsyncConnection, got {type(connection).__name__}"
            + ("; with a Connection, call the synchronous method (enqueue, enqueue_many)"
               if isinstance(connection, Connection) else "")
        )


def _in_transaction(conn: Connection, work: Callable[[Connection, Any], T], fast: Any) -> T:
    with conn.begin():
        return work(conn, fast)

