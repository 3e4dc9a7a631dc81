"""The worker's own engine: connections made the way the application's engine makes them, with
TCP keepalives, a bound on connecting, autocommit at READ COMMITTED and a pre-ping under the
worker's deadline (`worker_engine`). Enqueueing and the other clients use `engine`'s engines."""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time

from sqlalchemy import Engine, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.pool import Pool

from .._sanitize import error_text
from ..errors import ConfigurationError
from ..sql import session as session_sql
from ..sql.session import parameterized_text
from .deadline import driver_deadline
from .driver import decode_json_directly, send_arrays_in_binary
from .engine import (
    PROBE,
    READS_COMMITTED,
    WORKER_SESSION_DEFAULTS,
    Capabilities,
    application_name,
    dialect_options,
    has_pending_input,
    names_its_own,
    note_checkin,
    note_default_isolation,
    record_capabilities,
    run_constant,
)

logger = logging.getLogger("sqla_queue.worker")


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
    the application's own pool lends only the first connection of an engine that never
    connected (`_source_pool`), and keeps none. What the worker adds comes after: TCP
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
        **dialect_options(engine.url),
    )
    event.listen(ours, "connect", _worker_session_defaults if prepared_statements else note_default_isolation)
    event.listen(ours, "checkin", note_checkin)
    event.listen(ours, "checkout", _bounded_ping(call_timeout))
    record_capabilities(ours, Capabilities(driver_fast_path=True, autocommit_single_statements=True))
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
        proxied = _source_pool(engine, template).connect()
        proxied.detach()
        return proxied.dbapi_connection

    def connect():
        dbapi_connection = connect_within(seconds, make, timed_out)
        try:
            dbapi_connection.commit()  # ends a transaction a connect listener left open; else no-op
            keep_alive(dbapi_connection, call_timeout)
            decode_json_directly(dbapi_connection)
            send_arrays_in_binary(dbapi_connection)
            if not prepared_statements:
                dbapi_connection.prepare_threshold = None  # PgBouncer (transaction mode) before 1.21
            else:
                name_worker_connection(dbapi_connection)
        except BaseException:
            dbapi_connection.close()
            raise
        return dbapi_connection

    return connect


def _source_pool(engine: Engine, template: Pool) -> Pool:
    """The pool a worker connection is checked out of, then detached from: either way it went
    through the application's creator, ``do_connect`` and pool listeners.

    SQLAlchemy sets the application's dialect up from its pool's first connection, once, under
    that pool's lock. The template holds copies of the pool's listeners, that one included, but
    not the lock: were the worker's connection the first, the dialect would be set up outside
    it, and an application thread connecting meanwhile would find it half done
    (``'PGDialect_psycopg' object has no attribute 'default_isolation_level'``). So until the
    application's engine has connected once, the connection comes from its own pool (taken out
    of it, so no idle connection stays behind)."""
    return template if engine.dialect.server_version_info is not None else engine.pool


_SET_NAME, _SET_NAME_PARAMS = parameterized_text(session_sql.set_application_name())


def name_worker_connection(dbapi_connection) -> None:
    """``sqla-queue worker host:pid`` in ``pg_stat_activity``, unless the application named its
    connections (URL, ``connect_args``, ``PGAPPNAME``). The server reports the name on connect,
    so reading it costs nothing; setting it is one statement per new connection. Not behind
    PgBouncer in transaction mode, where a session setting would stay on a server connection
    that other clients then use."""
    if names_its_own(dbapi_connection.info.parameter_status("application_name")):
        return
    with dbapi_connection.cursor() as cursor:
        cursor.execute(_SET_NAME, {**_SET_NAME_PARAMS, "name": application_name("worker")})
    dbapi_connection.commit()


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


def _worker_session_defaults(dbapi_connection, connection_record) -> None:
    """Autocommit statements run at the session's default isolation, which a server may set
    to REPEATABLE READ or SERIALIZABLE; claims there fail with serialization errors. Generic
    plans: see `sql.session.worker_session_defaults`."""
    run_constant(dbapi_connection, WORKER_SESSION_DEFAULTS, commit=True)
    connection_record.info[READS_COMMITTED] = True


# A worker's connection is pinged at checkout only when the server has said something to it (a
# restart or a terminated backend: `has_pending_input`, no round trip) or after this long idle.
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
        if not rested and not has_pending_input(dbapi_connection):
            return
        try:
            with driver_deadline(dbapi_connection, call_timeout):
                run_constant(dbapi_connection, PROBE)
        except Exception as exc:
            raise sa_exc.DisconnectionError(error_text(exc)) from None

    return ping
