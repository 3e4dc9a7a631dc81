"""PgBouncer in front of a PostgreSQL of our own, and the drain through it beside the direct one.

``python -m benchmarks.pgbouncer [--jobs 5000] [--concurrency 10] [--repeat 3]`` starts an
embedded PostgreSQL 18 (`sqla_queue.testing.embedded_server`) and the distribution's PgBouncer
(``apt-get install pgbouncer``; Debian 12 ships 1.18, which has no protocol-level prepared
statements) in transaction pooling mode in front of it, then drains the same number of
pre-enqueued no-op jobs, alternating direct and through PgBouncer, in two ways:

* **in-process**: ``queue.worker(...).run(until_empty=True)`` in this process, timed from the
  database clock just before ``run`` to the last ``completed_at`` (pool warmed first);
* **CLI**: ``sqla-queue --app benchmarks.pgbouncer_app:queue worker --until-empty`` (with
  ``--pgbouncer`` through the pooler), timed from process start to the last ``completed_at``.

Both use the settings a deployment behind PgBouncer needs: the worker with
``prepared_statements=False, listen=False`` (``--pgbouncer``). The direct rows run with the
defaults (prepared statements, LISTEN), so the ratio is what moving a worker behind PgBouncer
costs. It prints one line per run and the medians with their ratio.

`pgbouncer_in_front` is also what tests/worker/test_pgbouncer.py starts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

INSTALL_HINT = "install it with `apt-get install -y pgbouncer` (bash .ci/run does)"


def pgbouncer_binary() -> str | None:
    """The ``pgbouncer`` executable: on PATH, or where Debian puts it (/usr/sbin, often not on a
    user's PATH)."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")


@dataclass(frozen=True)
class PgBouncer:
    """A running PgBouncer on 127.0.0.1:`port` in front of one PostgreSQL server."""

    port: int
    server_url: str  # the PostgreSQL behind it (postgresql+psycopg://...)
    log: Path

    def url(self, database_url: str | None = None) -> str:
        """`database_url` (a database on the server behind; default: the server's own URL) with
        its host and port replaced by PgBouncer's: the same database, through the pooler."""
        parsed = make_url(database_url or self.server_url)
        return parsed.set(host="127.0.0.1", port=self.port).render_as_string(hide_password=False)

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


@contextmanager
def pgbouncer_in_front(server_url: str, *, run_as: str | None = None, pool_size: int = 20,
                       pool_mode: str = "transaction") -> Iterator[PgBouncer]:
    """Start the distribution's PgBouncer in front of the PostgreSQL at `server_url` (trust
    authentication, user ``postgres``), every database on that server reachable through it.

    `run_as`: the OS user to run it as (PgBouncer refuses to run as root; pass the embedded
    server's ``run_as``). `pool_size`: server connections per database and user. Stopped (and
    its files deleted) on exit. Raises FileNotFoundError if PgBouncer is not installed."""
    binary = pgbouncer_binary()
    if binary is None:
        raise FileNotFoundError(f"pgbouncer is not installed: {INSTALL_HINT}")
    server = make_url(server_url)
    if run_as is None and os.geteuid() == 0:
        raise ValueError("PgBouncer refuses to run as root: pass run_as (an unprivileged OS user)")
    root = Path(tempfile.mkdtemp(prefix="sqlaq-pgbouncer-"))
    port = _free_port()
    (root / "userlist.txt").write_text(f'"{server.username or "postgres"}" ""\n')
    (root / "pgbouncer.ini").write_text("\n".join([
        "[databases]",
        f"* = host={server.host or '127.0.0.1'} port={server.port or 5432}",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = trust",
        f"auth_file = {root / 'userlist.txt'}",
        f"pool_mode = {pool_mode}",
        f"default_pool_size = {pool_size}",
        "max_client_conn = 1000",
        f"logfile = {root / 'pgbouncer.log'}",
        f"pidfile = {root / 'pgbouncer.pid'}",
        "",
    ]))
    if run_as is not None:
        for path in (root, *root.iterdir()):
            shutil.chown(path, run_as, run_as)
    process = subprocess.Popen([binary, "-q", str(root / "pgbouncer.ini")], user=run_as, cwd="/",
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    bouncer = PgBouncer(port=port, server_url=server_url, log=root / "pgbouncer.log")
    try:
        _wait_for_port(port, process, bouncer)
        yield bouncer
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(root, ignore_errors=True)


def _wait_for_port(port: int, process: subprocess.Popen, bouncer: PgBouncer) -> None:
    give_up = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise RuntimeError(f"pgbouncer exited with {process.returncode}: {stderr}{bouncer.log_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > give_up:
                raise RuntimeError(f"pgbouncer did not listen on {port} within 30 s: {bouncer.log_text()}")
            time.sleep(0.02)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
