"""Turning what the user gave us (an Engine or a URL) into the engine our statements use."""

from __future__ import annotations

import logging
import os
import select
import socket
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import PoolProxiedConnection

from .. import _validate
from .._sanitize import error_text
from ..errors import ConfigurationError, DatabaseError, PermissionDeniedError
from ..sql import session as session_sql

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

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


def record_capabilities(engine: Engine, capabilities: Capabilities) -> None:
    """What `engine`, built by this package, is known to allow (`capabilities_of` reads it)."""
    _BUILT[engine] = capabilities


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
        engine = create_engine(parsed, hide_parameters=True, connect_args=driver_options(parsed),
                               **dialect_options(parsed))
    except (sa_exc.ArgumentError, ImportError) as exc:
        raise ConfigurationError(f"cannot use {parsed.drivername}: {exc}") from None
    event.listen(engine, "do_connect", name_connection)
    event.listen(engine, "connect", note_default_isolation)
    event.listen(engine, "checkin", note_checkin)
    event.listen(engine, "checkout", _ping_if_idle_or_signalled)
    _BUILT[engine] = Capabilities(driver_fast_path=engine.dialect.driver == "psycopg", autocommit_enqueue=True)
    return engine


_HSTORE_DRIVERS = ("psycopg", "psycopg_async", "psycopg2")


def dialect_options(url: URL) -> dict[str, Any]:
    """``use_native_hstore=False`` where the driver has the option: the dialect otherwise looks
    the hstore type up on the first connection, a query that cost a fresh process's first
    enqueue about a millisecond. sqla_queue's tables have no hstore column; SQLAlchemy's
    ``HSTORE`` type still works on these engines, parsed by SQLAlchemy instead of the driver."""
    return {"use_native_hstore": False} if url.get_driver_name() in _HSTORE_DRIVERS else {}


def engine_of(engine_or_url: Engine | str) -> Engine:
    """`engine_or_url` itself, or `make_engine`'s engine for a URL."""
    return make_engine(engine_or_url) if isinstance(engine_or_url, str) else engine_or_url


def make_async_engine(url: str | URL) -> AsyncEngine:
    """An asyncio engine for a PostgreSQL URL: a synchronous driver's URL (``postgresql://``,
    ``postgresql+psycopg://``) gets psycopg 3's asyncio twin, so one URL serves both. The URL
    may carry psycopg's ``prepare_threshold`` (`driver_options`). SQLAlchemy's asyncio extension
    (and with it the ORM) is imported here, by the first asyncio use, not by every worker."""
    from sqlalchemy.ext.asyncio import create_async_engine

    parsed = async_url(url)
    try:
        engine = create_async_engine(parsed, hide_parameters=True, connect_args=driver_options(parsed),
                                     **dialect_options(parsed))
    except (sa_exc.ArgumentError, ImportError) as exc:
        raise ConfigurationError(f"cannot use {parsed.drivername}: {exc}") from None
    # The same checkout ping as `make_engine`'s: SQLAlchemy runs pool events of an asyncio
    # engine in its greenlet, where the adapted DBAPI connection answers like a synchronous one.
    event.listen(engine.sync_engine, "do_connect", name_connection)
    event.listen(engine.sync_engine, "checkin", note_checkin)
    event.listen(engine.sync_engine, "checkout", _ping_if_idle_or_signalled)
    return engine


APPLICATION_NAME_PREFIX = "sqla-queue"
"""What our default ``application_name`` starts with: a name that does not was the user's."""
_NAMEABLE_DRIVERS = ("psycopg", "psycopg_async", "psycopg2")


def application_name(role: str = "") -> str:
    """``sqla-queue [role ]host:pid``, as PostgreSQL keeps it (63 bytes at most), computed at
    connect time so a forked process names its own connections."""
    name = " ".join(part for part in (APPLICATION_NAME_PREFIX, role, f"{socket.gethostname()}:{os.getpid()}") if part)
    return name.encode()[:63].decode(errors="ignore")


def names_its_own(current: str | None) -> bool:
    """True when `current` (a session's application_name) was set by the user, not by us: the
    URL's ``?application_name=``, ``connect_args`` or ``PGAPPNAME``."""
    return bool(current) and not current.startswith(APPLICATION_NAME_PREFIX)


def name_connection(dialect, conn_rec, cargs, cparams) -> None:
    """Connections of an engine we built from a URL say whose they are in ``pg_stat_activity``,
    unless the URL (``?application_name=``) or ``PGAPPNAME`` already names them."""
    if dialect.driver in _NAMEABLE_DRIVERS and "application_name" not in cparams and not os.environ.get("PGAPPNAME"):
        cparams["application_name"] = application_name()


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
    if isinstance(value, str) and _validate.is_whole_number_text(value.strip()):
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
READS_COMMITTED = "sqla_queue_reads_committed"


# The session statements of `sql.session`, rendered once (they carry no values).
DEFAULT_ISOLATION = session_sql.constant_text(session_sql.default_isolation())
WORKER_SESSION_DEFAULTS = session_sql.constant_text(session_sql.worker_session_defaults())
PROBE = session_sql.constant_text(session_sql.probe())


def note_default_isolation(dbapi_connection, connection_record) -> None:
    (level,) = run_constant(dbapi_connection, DEFAULT_ISOLATION, alone=True)
    connection_record.info[READS_COMMITTED] = level == "read committed"


def run_constant(dbapi_connection, statement: str, *, commit: bool = False, alone: bool = False) -> tuple | None:
    """One of the constant statements above on a raw DBAPI connection, outside SQLAlchemy
    (connect and checkout events), ended by a commit or a rollback; `alone` (a read): in
    autocommit where the driver has it, one round trip instead of BEGIN, the statement and
    ROLLBACK, the connection left in the mode it was in."""
    if alone and getattr(dbapi_connection, "autocommit", None) is False:
        dbapi_connection.autocommit = True
        try:
            return run_constant(dbapi_connection, statement)
        finally:
            dbapi_connection.autocommit = False
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(statement)
        row = cursor.fetchone() if cursor.description else None
    finally:
        cursor.close()
    (dbapi_connection.commit if commit else dbapi_connection.rollback)()
    return row


# A `make_engine` connection that a self-contained statement of ours used stays in autocommit
# while it sits in the pool, so one enqueue after another switches nothing; whoever checks it
# out next for anything else gets it back out of autocommit (`_ping_if_idle_or_signalled`), as
# code sharing the engine (migrations on it, ``Session(queue.engine)``) expects.
AUTOCOMMIT_KEPT = "sqla_queue_autocommit_kept"
_AUTOCOMMIT_CHECKOUT = threading.local()


def autocommit_checkout(engine: Engine) -> PoolProxiedConnection:
    """A pooled connection of `engine` (a `make_engine` one) for a self-contained statement,
    in autocommit: switched on once, and left on when it goes back to the pool. The driver's
    error if it cannot be switched on."""
    _AUTOCOMMIT_CHECKOUT.active = True
    try:
        pooled = engine.raw_connection()
    finally:
        _AUTOCOMMIT_CHECKOUT.active = False
    if not pooled.info.get(AUTOCOMMIT_KEPT):
        try:
            pooled.driver_connection.autocommit = True
        except BaseException:
            pooled.close()
            raise
        pooled.info[AUTOCOMMIT_KEPT] = True
    return pooled


def _leave_kept_autocommit(dbapi_connection, info: dict) -> None:
    """At a checkout that is not `autocommit_checkout`'s: transactions as usual again. A
    connection that cannot leave autocommit is replaced (the pool tries another)."""
    if not info.get(AUTOCOMMIT_KEPT) or getattr(_AUTOCOMMIT_CHECKOUT, "active", False):
        return
    try:
        dbapi_connection.autocommit = False
    except Exception as exc:
        raise sa_exc.DisconnectionError(error_text(exc)) from None
    info[AUTOCOMMIT_KEPT] = False


def autocommit_reads_committed(conn: Connection | PoolProxiedConnection) -> bool:
    """Whether an autocommit statement on `conn` (from a `make_engine` engine, as a `Connection`
    or straight from the pool) runs READ COMMITTED."""
    return conn.info.get(READS_COMMITTED) is True


def _ping_if_idle_or_signalled(dbapi_connection, connection_record, connection_proxy) -> None:
    """SQLAlchemy's ``pool_pre_ping`` costs a ``SELECT 1`` round trip on every checkout, as much
    as the enqueue it precedes. Ping only a connection idle for `PING_IF_IDLE_FOR` (what a
    firewall or NAT that dropped it silently needs) or one the server has sent something to
    while it sat in the pool: a server that restarts or terminates a backend says so on the
    socket (an error message, then end of file), so that connection is replaced before use
    instead of failing the call. Left out: a connection used within the last second that broke
    without a word reaching us (a cable pulled just now) fails its statement; the call raises
    `DatabaseError` and the pool reconnects for the next one. Like ``pool_pre_ping`` before it,
    this ping has no deadline (the worker's engine has its own, bounded one). A connection kept
    in autocommit (`autocommit_checkout`) leaves it here unless that is who checks it out."""
    info = connection_record.info
    checked_in = info.get("checked_in")
    if checked_in is None:
        return  # brand new
    idle = time.monotonic() - checked_in >= PING_IF_IDLE_FOR
    if idle or has_pending_input(connection_proxy.driver_connection, info):
        try:
            run_constant(dbapi_connection, PROBE, alone=True)
        except Exception as exc:
            raise sa_exc.DisconnectionError(error_text(exc)) from None
    _leave_kept_autocommit(dbapi_connection, info)


def has_pending_input(dbapi_connection, info: dict | None = None) -> bool:
    """True if the server sent something to this idle connection (or its socket is unusable).
    A non-blocking poll of the socket: a couple of microseconds, no round trip. With `info`
    (the connection's), the poll object is made once per connection and kept there."""
    try:
        fd = dbapi_connection.fileno()
        if hasattr(select, "poll"):  # no FD_SETSIZE limit, unlike select()
            kept = info.get(_POLLER) if info is not None else None
            if kept is None or kept[0] != fd:
                kept = (fd, select.poll())
                kept[1].register(fd, select.POLLIN)
                if info is not None:
                    info[_POLLER] = kept
            return bool(kept[1].poll(0))
        return bool(select.select([fd], [], [], 0)[0])
    except Exception:
        return True


_POLLER = "sqla_queue_poller"


# A connection back in use within this many seconds is not pinged: one that broke meanwhile
# fails its statement, which every worker call retries. Pinging only idle connections keeps
# the extra round trip off the hot path and still makes a restart during a quiet spell free.
PING_IF_IDLE_FOR = 1.0


def note_checkin(dbapi_connection, connection_record) -> None:
    connection_record.info["checked_in"] = time.monotonic()


INSUFFICIENT_PRIVILEGE = "42501"


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
        denied = getattr(exc.orig, "sqlstate", None) == INSUFFICIENT_PRIVILEGE
        error = (PermissionDeniedError if denied else DatabaseError)(error_text(exc))
        error.orig = exc.orig  # type: ignore[attr-defined]
        error.connection_invalidated = exc.connection_invalidated  # type: ignore[attr-defined]
        raise error from None


def _redacted(url: str) -> str:
    return error_text(url, limit=200)
