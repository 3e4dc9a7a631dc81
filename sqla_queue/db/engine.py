"""Turning what the user gave us (an Engine or a URL) into the engine our statements use."""

from __future__ import annotations

import logging
import math
import os
import select
import socket
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, create_engine, event, exc as sa_exc
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import PoolProxiedConnection

from .deadline import driver_deadline
from .._sanitize import error_text
from ..errors import ConfigurationError, DatabaseError
from ..sql import session as session_sql

DATABASE_URL_ENV = "SQLA_QUEUE_DATABASE_URL"

logger = logging.getLogger("sqla_queue.worker")


@dataclass(frozen=True)
class Capabilities:
    """What an engine lets the executor do beyond plain SQLAlchemy execution, recorded when the
    engine is built or adopted (never guessed from its pool afterwards).

    :param driver_fast_path: the driver is psycopg 3: hot statements may run compiled once on
        the driver connection (`_driver.DriverStatement`).
    :param autocommit_single_statements: every connection is in autocommit and notes on
        connect whether its session defaults to READ COMMITTED (`worker_engine`): a
        self-contained statement on one that does needs no BEGIN/COMMIT.
    :param autocommit_enqueue: we built this engine from a URL (`make_engine`) and note on
        connect whether each session defaults to READ COMMITTED (`autocommit_reads_committed`):
        an enqueue that is all its call writes may run in autocommit on such a connection.
        Never true for an application's engine.
    """

    driver_fast_path: bool = False
    autocommit_single_statements: bool = False
    autocommit_enqueue: bool = False


# Engines built here, with what their hooks make possible. Keyed by the engine object, which
# `dispose()` keeps; weak, so a dropped engine is forgotten.
_BUILT: weakref.WeakKeyDictionary[Engine, Capabilities] = weakref.WeakKeyDictionary()


def capabilities_of(engine: Engine) -> Capabilities:
    """What `engine` allows: recorded by `make_engine` or `worker_engine` for their own engines;
    for any other (the application's) only the driver is looked at."""
    built = _BUILT.get(engine)
    if built is not None:
        return built
    return Capabilities(driver_fast_path=engine.dialect.driver == "psycopg")


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


def make_engine(url: str | URL) -> Engine:
    """An engine for a PostgreSQL URL; ``postgresql://`` means psycopg 3, and an asyncio
    driver's URL (``postgresql+psycopg_async://``) gets its synchronous twin. The URL may carry
    psycopg's ``prepare_threshold`` (`driver_options`)."""
    parsed = sync_url(url)
    try:
        engine = create_engine(parsed, hide_parameters=True, connect_args=driver_options(parsed))
    except (sa_exc.ArgumentError, ImportError) as exc:
        raise ConfigurationError(f"cannot use {parsed.drivername}: {exc}") from None
    event.listen(engine, "connect", _note_default_isolation)
    event.listen(engine, "checkin", _note_checkin)
    event.listen(engine, "checkout", _ping_if_idle_or_signalled)
    _BUILT[engine] = Capabilities(driver_fast_path=engine.dialect.driver == "psycopg", autocommit_enqueue=True)
    return engine


def engine_of(engine_or_url: Engine | str) -> Engine:
    """`engine_or_url` itself, or `make_engine`'s engine for a URL."""
    return make_engine(engine_or_url) if isinstance(engine_or_url, str) else engine_or_url


def make_async_engine(url: str | URL) -> AsyncEngine:
    """An asyncio engine for a PostgreSQL URL: a synchronous driver's URL (``postgresql://``,
    ``postgresql+psycopg://``) gets psycopg 3's asyncio twin, so one URL serves both. The URL
    may carry psycopg's ``prepare_threshold`` (`driver_options`)."""
    parsed = async_url(url)
    try:
        engine = create_async_engine(parsed, hide_parameters=True, connect_args=driver_options(parsed))
    except (sa_exc.ArgumentError, ImportError) as exc:
        raise ConfigurationError(f"cannot use {parsed.drivername}: {exc}") from None
    # The same checkout ping as `make_engine`'s: SQLAlchemy runs pool events of an asyncio
    # engine in its greenlet, where the adapted DBAPI connection answers like a synchronous one.
    event.listen(engine.sync_engine, "checkin", _note_checkin)
    event.listen(engine.sync_engine, "checkout", _ping_if_idle_or_signalled)
    return engine


PREPARE_THRESHOLD = "prepare_threshold"
_NEVER = ("none", "")


def driver_options(url: URL) -> dict:
    """Connection options a URL's query gives psycopg 3 beyond libpq's: ``prepare_threshold``.

    psycopg prepares a statement server-side once a connection has run it that many times
    (default 5). PgBouncer in transaction pooling mode before 1.21 hands each transaction to any
    server connection, where that prepared statement does not exist (or another client's of the
    same name does), so behind it a URL says ``?prepare_threshold=none``: never prepare.
    SQLAlchemy would pass the query's text through as it is, which psycopg cannot compare with
    its counter; here ``none`` (or nothing) means None and a number its integer. Only for
    psycopg URLs: another driver gets its query untouched."""
    if url.get_driver_name() not in ("psycopg", "psycopg_async") or PREPARE_THRESHOLD not in url.query:
        return {}
    value = url.query[PREPARE_THRESHOLD]
    if isinstance(value, str) and value.strip().lower() in _NEVER:
        return {PREPARE_THRESHOLD: None}
    if isinstance(value, str) and value.strip().isdigit():
        return {PREPARE_THRESHOLD: int(value)}
    raise ConfigurationError(
        f"{PREPARE_THRESHOLD} in the database URL must be a whole number of executions (0 or more) "
        f"or 'none' (never prepare: behind PgBouncer in transaction mode), got {value!r}"
    )


def parse_url(url: str | URL) -> URL:
    """A PostgreSQL URL, or a `ConfigurationError` that shows it with its password hidden."""
    if isinstance(url, URL):
        parsed = url
    else:
        try:
            parsed = make_url(url)
        except (sa_exc.ArgumentError, ValueError):
            raise ConfigurationError(f"not a database URL: {_redacted(url)!r}") from None
    if parsed.get_backend_name() != "postgresql":
        raise ConfigurationError(
            f"sqla_queue needs a postgresql:// URL, got {parsed.get_backend_name()}://"
        )
    return parsed


_SYNC_PSYCOPG, _ASYNC_PSYCOPG = "postgresql+psycopg", "postgresql+psycopg_async"


def _is_async_driver(url: URL) -> bool:
    try:
        return bool(url.get_dialect().is_async)
    except (sa_exc.ArgumentError, sa_exc.NoSuchModuleError, ImportError):
        return False


def sync_url(url: str | URL) -> URL:
    """`url` for a synchronous engine: ``postgresql://`` and asyncio drivers mean psycopg 3."""
    parsed = parse_url(url)
    if parsed.drivername == "postgresql" or _is_async_driver(parsed):
        return parsed.set(drivername=_SYNC_PSYCOPG)
    return parsed


def async_url(url: str | URL) -> URL:
    """`url` for an asyncio engine: ``postgresql://`` and synchronous drivers mean psycopg 3's
    asyncio driver."""
    parsed = parse_url(url)
    if _is_async_driver(parsed):
        return parsed
    return parsed.set(drivername=_ASYNC_PSYCOPG)


def async_library_engine(engine: AsyncEngine) -> AsyncEngine:
    """`library_engine` for an application's asyncio engine: a READ COMMITTED,
    parameters-hidden view sharing its pool."""
    if engine.dialect.name != "postgresql":
        raise ConfigurationError(f"sqla_queue needs PostgreSQL, got a {engine.dialect.name} engine")
    ours = engine.execution_options(isolation_level="READ COMMITTED")
    ours.sync_engine.hide_parameters = True
    return ours


def is_url_of(url: str, engine: Engine) -> bool:
    """True if `url`, read as `make_engine` reads it, is the URL `engine` was built from."""
    try:
        return sync_url(url) == engine.url
    except ConfigurationError:
        return False


# `make_engine`'s connections record whether their session's default isolation is READ COMMITTED
# (in the connection's ``info``, which lives exactly as long as the DBAPI connection). On those, a
# self-contained statement may run in autocommit: it is then its own READ COMMITTED transaction,
# one round trip instead of BEGIN + statement + COMMIT. The session is only looked at, never
# changed: code sharing the engine (``Session(queue.engine)``) keeps the database's defaults.
_READS_COMMITTED = "sqla_queue_reads_committed"


# The session statements of `sql.session`, rendered once (they carry no values).
DEFAULT_ISOLATION = session_sql.constant_text(session_sql.default_isolation())
READ_COMMITTED_BY_DEFAULT = session_sql.constant_text(session_sql.read_committed_by_default())
PROBE = session_sql.constant_text(session_sql.probe())


def _note_default_isolation(dbapi_connection, connection_record) -> None:
    (level,) = run_constant(dbapi_connection, DEFAULT_ISOLATION)
    connection_record.info[_READS_COMMITTED] = level == "read committed"


def run_constant(dbapi_connection, statement: str, *, commit: bool = False) -> tuple | None:
    """One of the constant statements above on a raw DBAPI connection, outside SQLAlchemy
    (connect and checkout events), ended by a commit or a rollback."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(statement)
        row = cursor.fetchone() if cursor.description else None
    finally:
        cursor.close()
    (dbapi_connection.commit if commit else dbapi_connection.rollback)()
    return row


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
    idle = time.monotonic() - checked_in >= PING_IF_IDLE_FOR
    if not idle and not _has_pending_input(connection_proxy.driver_connection):
        return
    try:
        run_constant(dbapi_connection, PROBE)
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
    """A dedicated engine for a worker, whose connections are made the way `engine` makes its own.

    Connections: the application's engine knows how to connect (``connect_args`` such as
    ``application_name`` or ``sslmode``, ``do_connect`` listeners that fetch an IAM token,
    a ``creator``, pool ``connect`` listeners), but SQLAlchemy keeps none of that where it can
    be read back: ``connect_args`` live in a closure, and rebuilding an engine from
    ``engine.url`` drops them all. `Pool.recreate` (public, what ``Engine.dispose`` uses) gives
    a pool configured exactly like the application's, with the same creator and a copy of its
    listeners; each worker connection is checked out of that template and detached from it
    (`PoolProxiedConnection.detach`, public), so it went through every hook the application
    registered, and then belongs to the worker's own pool. No private attribute is read, and
    the application's own pool is never touched. What the worker adds comes after: TCP
    keepalives and ``tcp_user_timeout`` set on the socket (the same socket options libpq sets
    from the connection parameters of the same names), a bound on the time a connection may
    take (`connect_within`), and the settings below.

    Its connections run in autocommit. On a direct connection (`prepared_statements`, i.e. not
    behind PgBouncer's transaction pooling) every session it opens is set to default to READ
    COMMITTED: a self-contained statement (the worker's complete-and-claim round) is then its
    own transaction, one round trip instead of BEGIN + statement + COMMIT. Behind PgBouncer a
    session setting would not follow the statement to its server connection, so the session's
    default is only read (`autocommit_reads_committed`): it is the database's (PostgreSQL's own
    default is READ COMMITTED, and every server connection of the pool has the same), and where
    it is something else self-contained statements get explicit READ COMMITTED transactions.
    Multi-statement work always gets explicit READ COMMITTED transactions through
    `library_engine`.

    Pre-ping runs in the pool's checkout event under the same client-side deadline as every
    other worker call, instead of SQLAlchemy's built-in ``pool_pre_ping`` whose ``SELECT 1``
    could wait forever on a half-open connection. A failed ping discards the connection and the
    pool tries a fresh one, so a server restart costs no failed call.
    """
    require_psycopg(engine)
    ours = create_engine(
        engine.url,
        creator=_connections_like(engine, call_timeout=call_timeout, prepared_statements=prepared_statements),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=False,
        hide_parameters=True,
        isolation_level="AUTOCOMMIT",
    )
    event.listen(ours, "connect", _read_committed_by_default if prepared_statements else _note_default_isolation)
    event.listen(ours, "checkin", _note_checkin)
    event.listen(ours, "checkout", _bounded_ping(call_timeout))
    _BUILT[ours] = Capabilities(driver_fast_path=True, autocommit_single_statements=True)
    return ours


def require_psycopg(engine: Engine) -> None:
    """The worker LISTENs, cuts stalled calls and runs its claim statement through psycopg 3;
    with another driver it would fail later and less clearly. Enqueueing needs no such thing."""
    if engine.dialect.driver != "psycopg":
        raise ConfigurationError(
            f"the worker needs psycopg 3, and this engine uses {engine.url.drivername}. Enqueueing "
            "through it is fine; give the worker a psycopg 3 engine on the same database: "
            "queue.worker(engine=create_engine('postgresql+psycopg://...')), or on the command line "
            "--database-url postgresql+psycopg://..."
        )


def _connections_like(engine: Engine, *, call_timeout: float, prepared_statements: bool):
    """A ``creator`` for the worker's engine: see `worker_engine`."""
    template = engine.pool.recreate()
    seconds = max(2, math.ceil(call_timeout))  # libpq's own minimum connect_timeout is 2 s
    timed_out = engine.dialect.loaded_dbapi.OperationalError

    def make():
        proxied = template.connect()  # the application's creator, do_connect and pool listeners
        proxied.detach()
        return proxied.dbapi_connection

    def connect():
        dbapi_connection = connect_within(seconds, make, timed_out)
        try:
            dbapi_connection.commit()  # ends a transaction a connect listener left open; else no-op
            keep_alive(dbapi_connection, call_timeout)
            if not prepared_statements:
                dbapi_connection.prepare_threshold = None  # PgBouncer (transaction mode) before 1.21
        except BaseException:
            dbapi_connection.close()
            raise
        return dbapi_connection

    return connect


def connect_within(seconds: float, make, timed_out: type[Exception]):
    """``make()`` on a thread of its own, given up after `seconds` (raising `timed_out`, the
    driver's OperationalError, which SQLAlchemy and the worker treat as a failed call).

    The application's engine decides how a connection is made, so the worker cannot pass its
    own ``connect_timeout``; psycopg would otherwise wait up to its default of 130 s, during
    which the lease keeper cannot fence what it holds. An attempt given up on finishes on its
    daemon thread and closes what it got.
    """
    attempt = _Attempt(make)
    threading.Thread(target=attempt.run, name="sqla-queue-connect", daemon=True).start()
    return attempt.result(seconds, timed_out)


class _Attempt:
    """One connection attempt: whoever comes second (the caller giving up, or the connection
    arriving late) decides, under the lock, that the connection is closed."""

    def __init__(self, make) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._abandoned = False
        self._connection = None
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            connection = self._make()
        except BaseException as exc:
            self._error = exc
        else:
            with self._lock:
                if self._abandoned:
                    _close_quietly(connection)
                else:
                    self._connection = connection
        finally:
            self._finished.set()

    def result(self, seconds: float, timed_out: type[Exception]):
        self._finished.wait(seconds)
        with self._lock:
            if self._connection is None and self._error is None:
                self._abandoned = True
                raise timed_out(f"connection attempt timed out after {seconds:g}s")
        if self._error is not None:
            raise self._error
        return self._connection


def _close_quietly(dbapi_connection) -> None:
    try:
        dbapi_connection.close()
    except Exception:
        pass


def keep_alive(dbapi_connection, call_timeout: float) -> None:
    """TCP keepalives and ``tcp_user_timeout`` (unacknowledged sends abort the connection) on a
    connected socket, as libpq sets them from its connection parameters; Unix sockets have none."""
    seconds = max(1, math.ceil(call_timeout))
    options = (
        (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPIDLE", getattr(socket, "TCP_KEEPALIVE", None)), seconds),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPINTVL", None), max(1, seconds // 3)),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPCNT", None), 3),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_USER_TIMEOUT", None), seconds * 1000),
    )
    try:
        duplicate = os.dup(dbapi_connection.fileno())  # closing it leaves the driver's socket open
        try:
            sock = socket.socket(fileno=duplicate)
        except OSError:
            os.close(duplicate)
            raise
        with sock:
            if sock.family not in (socket.AF_INET, socket.AF_INET6):
                return
            for level, option, value in options:
                if option is not None:
                    sock.setsockopt(level, option, value)
    except OSError as exc:
        logger.warning("worker connection: cannot set TCP keepalives: %s", error_text(exc))


def _read_committed_by_default(dbapi_connection, connection_record) -> None:
    """Autocommit statements run at the session's default isolation, which a server may set
    to REPEATABLE READ or SERIALIZABLE; claims there fail with serialization errors."""
    run_constant(dbapi_connection, READ_COMMITTED_BY_DEFAULT, commit=True)
    connection_record.info[_READS_COMMITTED] = True


# A connection back in use within this many seconds is not pinged: one that broke meanwhile
# fails its statement, which every worker call retries. Pinging only idle connections keeps
# the extra round trip off the hot path and still makes a restart during a quiet spell free.
PING_IF_IDLE_FOR = 1.0


def _note_checkin(dbapi_connection, connection_record) -> None:
    connection_record.info["checked_in"] = time.monotonic()


# A worker's connection is pinged at checkout only when the server has said something to it (a
# restart or a terminated backend: `_has_pending_input`, no round trip) or after this long idle.
# Its TCP keepalives report a silently dead peer as a socket error, which also counts as
# pending input; the ping after a long rest covers sockets without keepalives. Pinging at every
# checkout after `PING_IF_IDLE_FOR` instead cost an idle worker one extra transaction per poll
# interval and every wake-up one extra round trip.
WORKER_PING_IF_IDLE_FOR = 30.0


def _bounded_ping(call_timeout: float):
    def ping(dbapi_connection, connection_record, connection_proxy) -> None:
        checked_in = connection_record.info.get("checked_in")
        if checked_in is None:
            return  # brand new
        rested = time.monotonic() - checked_in >= WORKER_PING_IF_IDLE_FOR
        if not rested and not _has_pending_input(dbapi_connection):
            return
        try:
            with driver_deadline(dbapi_connection, call_timeout):
                run_constant(dbapi_connection, PROBE)
        except Exception as exc:
            raise sa_exc.DisconnectionError(error_text(exc)) from None

    return ping


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
