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

Through PgBouncer both use the settings docs/how-to/run-workers.md gives: the queue's URL with
``?prepare_threshold=none``, the worker with ``prepared_statements=False`` and its listener on
the direct connection (``--pgbouncer --listen-url``). The direct rows run with the defaults
(prepared statements, a session set to READ COMMITTED), so the ratio is what moving a worker
behind PgBouncer costs; a third route runs PgBouncer's settings on the direct connection, to
tell their cost from the pooler's hop. It prints one line per run and the medians with the
ratio.

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

from sqla_queue.testing import embedded_server, migrated_database

from . import raw_sql, tables
from .server import Database

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
    config: Path  # its pgbouncer.ini

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
    bouncer = PgBouncer(port=port, server_url=server_url, log=root / "pgbouncer.log",
                        config=root / "pgbouncer.ini")
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


# -- the benchmark ------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
NEVER_PREPARE = {"prepare_threshold": "none"}
FIRST_CLAIM = f"SELECT min(locked_at) FROM {raw_sql.TABLE} WHERE status = 'completed'"


@dataclass(frozen=True)
class Route:
    """How the worker reaches the database: its queue's URL, and the worker options (Python)
    and flags (CLI) that go with it."""

    name: str
    queue_url: str
    options: dict
    flags: tuple[str, ...]


ROUTES = ("direct", "direct, PgBouncer's settings", "through PgBouncer")


def routes(direct_url: str, bouncer: PgBouncer) -> tuple[Route, Route, Route]:
    """Direct with the defaults; through PgBouncer as run-workers.md says (never prepare, no
    session setting, LISTEN on the direct connection); and, between the two, those settings on
    the direct connection, which separates what they cost from what the pooler's hop costs."""
    never = make_url(direct_url).update_query_dict(NEVER_PREPARE).render_as_string(hide_password=False)
    via = make_url(bouncer.url(direct_url)).update_query_dict(NEVER_PREPARE).render_as_string(hide_password=False)
    options = {"prepared_statements": False, "listen_engine": direct_url}
    flags = ("--pgbouncer", "--listen-url", direct_url)
    return (
        Route(ROUTES[0], direct_url, {}, ()),
        Route(ROUTES[1], never, options, flags),
        Route(ROUTES[2], via, options, flags),
    )


def drain_in_process(db: Database, route: Route, jobs: int, concurrency: int) -> dict:
    """``queue.worker(...).run(until_empty=True)`` here; from the database clock just before
    `run` (pool warmed) to the last completion."""
    from .bench_app import make_queue

    tables.reset(db, pending=jobs)
    queue = make_queue(route.queue_url)
    try:
        worker = queue.worker(queues=[raw_sql.QUEUE], concurrency=concurrency, **route.options)
        _warm(worker, concurrency)
        started = _db_clock(db)
        summary = worker.run(until_empty=True)
    finally:
        queue.engine.dispose()
    return _drained(db, jobs, started, lost=summary.lost)


def drain_cli(db: Database, route: Route, jobs: int, concurrency: int) -> dict:
    """``sqla-queue --app benchmarks.pgbouncer_app:queue worker --until-empty`` as a process;
    wall from just before it starts to the last completion, and steady from its first claim."""
    tables.reset(db, pending=jobs)
    command = [sys.executable, "-c", "from sqla_queue.cli import run; run()",
               "--app", "benchmarks.pgbouncer_app:queue", "worker", "--processes", "1", "--queues", raw_sql.QUEUE,
               "--concurrency", str(concurrency), "--until-empty", "--log-level", "WARNING", *route.flags]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env.update(SQLA_QUEUE_DATABASE_URL=route.queue_url, SQLA_QUEUE_DISABLE_PLUGIN_AUTOLOAD="1")
    started = _db_clock(db)
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"the CLI worker ({route.name}) exited with {result.returncode}: {result.stderr[-2000:]}")
    out = _drained(db, jobs, started, lost=0)
    with db.connect() as conn:
        first_claim = conn.execute(FIRST_CLAIM).fetchone()[0]
    steady = (out["last"] - first_claim).total_seconds()
    return {**out, "steady_jobs_per_s": out["jobs"] / steady}


def _warm(worker, concurrency: int) -> None:
    """Open the worker's pool before the clock starts, as `procs` does for its workers."""
    conns = [worker.engine.connect() for _ in range(min(concurrency, 4) + 2)]
    for conn in conns:
        conn.close()


def _db_clock(db: Database):
    with db.connect() as conn:
        return conn.execute(raw_sql.DB_CLOCK).fetchone()[0]


def _drained(db: Database, jobs: int, started, *, lost: int) -> dict:
    with db.connect() as conn:
        done, last, claims = conn.execute(raw_sql.DRAIN_RESULT).fetchone()
    if done != jobs or lost:
        raise RuntimeError(f"drain completed {done} of {jobs} jobs ({lost} lost)")
    seconds = (last - started).total_seconds()
    return {"jobs": done, "last": last, "seconds": seconds, "jobs_per_s": done / seconds,
            "batch": done / claims if claims else None}


def measure(jobs: int, concurrency: int, repeat: int, log=print) -> dict:
    """Every repetition runs each (kind, route) once, direct and PgBouncer back to back, so a
    ratio compares runs that shared the machine's state."""
    rows: dict[str, dict[str, list[float]]] = {
        name: {route: [] for route in ROUTES}
        for name in ("in-process", "CLI, wall from process start", "CLI, steady from first claim")
    }
    with embedded_server() as server, migrated_database(server=server.url) as url:
        direct = make_url(url).set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
        db = Database(url=make_url(url).set(drivername="postgresql").render_as_string(hide_password=False),
                      embedded=True, bin_dir=server.bin_dir)
        with pgbouncer_in_front(server.url, run_as=server.run_as) as bouncer:
            for rep in range(repeat):
                for route in routes(direct, bouncer):
                    inproc = drain_in_process(db, route, jobs, concurrency)
                    cli = drain_cli(db, route, jobs, concurrency)
                    rows["in-process"][route.name].append(inproc["jobs_per_s"])
                    rows["CLI, wall from process start"][route.name].append(cli["jobs_per_s"])
                    rows["CLI, steady from first claim"][route.name].append(cli["steady_jobs_per_s"])
                    log(f"rep {rep + 1} {route.name:28}: in-process {inproc['jobs_per_s']:7,.0f} jobs/s "
                        f"(batch {inproc['batch']:.1f}); CLI {cli['jobs_per_s']:7,.0f} jobs/s wall, "
                        f"{cli['steady_jobs_per_s']:7,.0f} steady")
    return {name: {route: statistics.median(values) for route, values in by_route.items()}
            for name, by_route in rows.items()}


def table(medians: dict, *, jobs: int, concurrency: int, repeat: int) -> str:
    lines = [f"| {jobs:,} no-op jobs, 1 worker x {concurrency}, median of {repeat}, jobs/s | "
             + " | ".join(ROUTES) + " | through PgBouncer / direct |", "|---|---|---|---|---|"]
    for name, row in medians.items():
        lines.append(f"| {name} | " + " | ".join(f"{row[route]:,.0f}" for route in ROUTES)
                     + f" | {row[ROUTES[2]] / row[ROUTES[0]]:.0%} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pgbouncer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000, help="no-op jobs per drain (default 5000)")
    parser.add_argument("--concurrency", type=int, default=10, help="worker concurrency (default 10)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions; the medians are reported (default 3)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if pgbouncer_binary() is None:
        sys.exit(f"python -m benchmarks.pgbouncer: pgbouncer is not installed: {INSTALL_HINT}")
    medians = measure(args.jobs, args.concurrency, args.repeat, log=lambda line: print(line, file=sys.stderr))
    print(table(medians, jobs=args.jobs, concurrency=args.concurrency, repeat=args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
