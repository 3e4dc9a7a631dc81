"""Turning what the user gave us (an Engine or a URL) into the engine our statements use."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, event, exc as sa_exc
from sqlalchemy.engine import make_url

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
        return create_engine(parsed, hide_parameters=True, pool_pre_ping=True)
    except (sa_exc.ArgumentError, ImportError) as exc:
        raise ConfigurationError(f"cannot use {parsed.drivername}: {exc}") from None


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
    dbapi_connection.execute("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED")
    dbapi_connection.commit()


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
                dbapi_connection.execute("SELECT 1")  # a constant probe, no values
                dbapi_connection.rollback()
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
