"""Turning what the user gave us (an Engine or a URL) into the engine our statements use."""

from __future__ import annotations

import math
import os
import select
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, create_engine, event, exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.pool import PoolProxiedConnection

from ._deadline import driver_deadline
from ._sanitize import error_text
from .errors import ConfigurationError, DatabaseError

DATABASE_URL_ENV = "SQLA_QUEUE_DATABASE_URL"


def library_engine(engine_or_url: Engine | str) -> Engine:
    """A view of the user's engine for our statements: READ COMMITTED, parameters hidden.

    ``execution_options()`` returns a proxy that shares the user's pool but carries its own
    options, so the host's engine keeps its isolation level and logging untouched. Claims at
    REPEATABLE READ or SERIALIZABLE would fail with serialization errors under concurrency.
    """
    engine = make_engine(engine_or_url) if isinstance(engine_or_url, str) else engine_or_url
    if not isinstance(engine, Engine):
        raise ConfigurationError(
            f"engine must be a sqlalchemy Engine or a database URL, got {type(engine).__name__}"
        )
    if engine.dialect.name != "postgresql":
        raise ConfigurationError(f"sqla_queue needs PostgreSQL, got a {engine.dialect.name} engine")
    ours = engine.execution_options(isolation_level="READ COMMITTED")
    # Bound parameters carry payloads, which may hold secrets: keep them out of error messages.
    ours.hide_parameters = True
    return ours


def make_engine(url: str) -> Engine:
    """An engine for a PostgreSQL URL; ``postgresql://`` means psycopg 3."""
    try:
        parsed = make_url(url)
    except (sa_exc.ArgumentError, ValueError):
        raise ConfigurationError(f"not a database URL: {_redacted(url)!r}") from None
    if parsed.get_backend_name() != "postgresql":
        raise ConfigurationError(
            f"sqla_queue needs a postgresql:// URL, got {parsed.get_backend_name()}://"
        )
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    try:
        engine = create_engine(parsed, hide_parameters=True)
    except (sa_exc.ArgumentError, ImportError) as exc:
        raise ConfigurationError(f"cannot use {parsed.drivername}: {exc}") from None
    event.listen(engine, "connect", _note_default_isolation)
    event.listen(engine, "checkin", _note_checkin)
    event.listen(engine, "checkout", _ping_if_idle_or_signalled)
    return engine


# `make_engine`'s connections record whether their session's default isolation is READ COMMITTED
# (in the connection's ``info``, which lives exactly as long as the DBAPI connection). On those, a
# self-contained statement may run in autocommit: it is then its own READ COMMITTED transaction,
# one round trip instead of BEGIN + statement + COMMIT. The session is only looked at, never
# changed: code sharing the engine (``Session(queue.engine)``) keeps the database's defaults.
_READS_COMMITTED = "sqla_queue_reads_committed"


def _note_default_isolation(dbapi_connection, connection_record) -> None:
    (level,) = _run_constant(dbapi_connection, "SHOW default_transaction_isolation")
    connection_record.info[_READS_COMMITTED] = level == "read committed"


def _run_constant(dbapi_connection, statement: str, *, commit: bool = False) -> tuple | None:
    """One of our constant statements (no values) on a raw DBAPI connection, outside
    SQLAlchemy (connect and checkout events), ended by a commit or a rollback."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(statement)
        row = cursor.fetchone() if cursor.description else None
    finally:
        cursor.close()
    (dbapi_connection.commit if commit else dbapi_connection.rollback)()
    return row


def built_by_make_engine(engine: Engine) -> bool:
    """True for an engine from `make_engine` (or a view of one): ours to run statements on in
    autocommit where `autocommit_reads_committed` says the session allows it. Never true for
    an engine the application built."""
    # Pool listeners live on the pool's dispatch, which a view (`Engine.execution_options`)
    # shares and `dispose()` hands to the new pool; `event.contains` only knows the engine
    # they were registered on.
    return any(listener is _note_default_isolation for listener in engine.pool.dispatch.connect)


def autocommit_reads_committed(conn: Connection | PoolProxiedConnection) -> bool:
    """Whether an autocommit statement on `conn` (from a `make_engine` engine, as a `Connection`
    or straight from the pool) runs READ COMMITTED."""
    return conn.info.get(_READS_COMMITTED) is True


def _ping_if_idle_or_signalled(dbapi_connection, connection_record, connection_proxy) -> None:
    """SQLAlchemy's ``pool_pre_ping`` costs a ``SELECT 1`` round trip on every checkout, as much
    as the enqueue it precedes. Ping only a connection idle for `PING_IF_IDLE_FOR` (what a
    firewall or NAT that dropped it silently needs) or one the server has sent something to
    while it sat in the pool: a server that restarts or terminates a backend says so on the
    socket (an error message, then end of file), so that connection is replaced before use
    instead of failing the call. Left out: a connection used within the last second that broke
    without a word reaching us (a cable pulled just now) fails its statement; the call raises
    `DatabaseError` and the pool reconnects for the next one. Like ``pool_pre_ping`` before it,
    this ping has no deadline (the worker's engine has its own, bounded one)."""
    checked_in = connection_record.info.get("checked_in")
    if checked_in is None:
        return  # brand new
    if time.monotonic() - checked_in < PING_IF_IDLE_FOR and not _has_pending_input(dbapi_connection):
        return
    try:
        _run_constant(dbapi_connection, "SELECT 1")
    except Exception as exc:
        raise sa_exc.DisconnectionError(error_text(exc)) from None


def _has_pending_input(dbapi_connection) -> bool:
    """True if the server sent something to this idle connection (or its socket is unusable).
    A non-blocking poll of the socket: a couple of microseconds, no round trip."""
    try:
        fd = dbapi_connection.fileno()
        if hasattr(select, "poll"):  # no FD_SETSIZE limit, unlike select()
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([fd], [], [], 0)[0])
    except Exception:
        return True


def worker_engine(
    engine: Engine, *, pool_size: int, call_timeout: float, prepared_statements: bool = True
) -> Engine:
    """A dedicated engine for a worker, on the same database as `engine`.

    On a direct connection (`prepared_statements`, i.e. not behind PgBouncer's transaction
    pooling) it runs in autocommit and every session it opens defaults to READ COMMITTED: a
    self-contained statement (the worker's complete-and-claim round) is then its own
    transaction, one round trip instead of BEGIN + statement + COMMIT. Multi-statement work
    still gets explicit READ COMMITTED transactions through `library_engine`. Behind PgBouncer a
    session setting would not follow the statement to its server connection, so that engine
    keeps explicit transactions for everything.

    Its connections detect dead peers: TCP keepalives and ``tcp_user_timeout`` (unacknowledged
    sends abort the connection) and a connect timeout. Pre-ping runs in the pool's checkout
    event under the same client-side deadline as every other worker call, instead of
    SQLAlchemy's built-in ``pool_pre_ping`` whose ``SELECT 1`` could wait forever on a
    half-open connection. A failed ping discards the connection and the pool tries a fresh
    one, so a server restart costs no failed call.
    """
    timeout_s = max(1, math.ceil(call_timeout))
    connect_args = {
        "connect_timeout": timeout_s,
        "keepalives": 1,
        "keepalives_idle": timeout_s,
        "keepalives_interval": max(1, timeout_s // 3),
        "keepalives_count": 3,
        "tcp_user_timeout": timeout_s * 1000,
    }
    if not prepared_statements:
        connect_args["prepare_threshold"] = None  # PgBouncer (transaction mode) before 1.21
    ours = create_engine(
        engine.url,
        connect_args=connect_args,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=False,
        hide_parameters=True,
        **({"isolation_level": "AUTOCOMMIT"} if prepared_statements else {}),
    )
    if prepared_statements:
        event.listen(ours, "connect", _read_committed_by_default)
    event.listen(ours, "checkin", _note_checkin)
    event.listen(ours, "checkout", _bounded_ping(call_timeout))
    return ours


def runs_single_statements_in_autocommit(engine: Engine) -> bool:
    """True for a `worker_engine` whose sessions default to READ COMMITTED in autocommit."""
    return event.contains(engine, "connect", _read_committed_by_default)


def _read_committed_by_default(dbapi_connection, connection_record) -> None:
    """Autocommit statements run at the session's default isolation, which a server may set
    to REPEATABLE READ or SERIALIZABLE; claims there fail with serialization errors."""
    _run_constant(dbapi_connection, "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED",
                  commit=True)


# A connection back in use within this many seconds is not pinged: one that broke meanwhile
# fails its statement, which every worker call retries. Pinging only idle connections keeps
# the extra round trip off the hot path and still makes a restart during a quiet spell free.
PING_IF_IDLE_FOR = 1.0


def _note_checkin(dbapi_connection, connection_record) -> None:
    connection_record.info["checked_in"] = time.monotonic()


def _bounded_ping(call_timeout: float):
    def ping(dbapi_connection, connection_record, connection_proxy) -> None:
        checked_in = connection_record.info.get("checked_in")
        if checked_in is None or time.monotonic() - checked_in < PING_IF_IDLE_FOR:
            return  # brand new, or used a moment ago
        try:
            with driver_deadline(dbapi_connection, call_timeout):
                _run_constant(dbapi_connection, "SELECT 1")
        except Exception as exc:
            raise sa_exc.DisconnectionError(error_text(exc)) from None

    return ping


def database_url_from_env() -> str | None:
    return os.environ.get(DATABASE_URL_ENV) or None


@contextmanager
def database_errors() -> Iterator[None]:
    """Re-raise driver errors as `DatabaseError` with a sanitized message.

    SQLAlchemy's own message embeds the SQL and, on engines that do not hide them, the bound
    parameters; the chained original would print them again in a traceback. The driver error
    stays reachable as ``.orig``.
    """
    try:
        yield
    except sa_exc.DBAPIError as exc:
        error = DatabaseError(error_text(exc))
        error.orig = exc.orig  # type: ignore[attr-defined]
        error.connection_invalidated = exc.connection_invalidated  # type: ignore[attr-defined]
        raise error from None


def _redacted(url: str) -> str:
    return error_text(url, limit=200)
