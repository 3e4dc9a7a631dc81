"""Section 7, idle cost: what workers with nothing to do cost the database and their host.

N worker processes started as an operator would (``python -m sqla_queue.cli --app APP worker
--queues bench``: default concurrency 4, poll interval 1 s, LISTEN on) on an empty queue. Once
every one has its connections open, the section waits `settle` seconds, then takes two samples
`window` seconds apart of:

* ``xact_commit`` of the workers' database in ``pg_stat_database``, read from the server's
  maintenance database so the sampling commits nothing in the database it measures (nothing
  else connects to it meanwhile);
* each worker process's CPU time, ``utime + stime`` of ``/proc/PID/stat`` (every thread).

A backend hands its transaction counts to the statistics system when it goes idle at most once
a second (otherwise up to ~10 s later): both samples are taken in the steady state, so that lag
moves them alike. Linux only (``/proc``).

Standalone, for a comparison between two checkouts (the worker processes import whichever
sqla_queue comes first on ``PYTHONPATH``)::

    python -m benchmarks.idle --workers 1 --window 20
    python -m benchmarks.idle --workers 1 --queues 6 --window 20
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

from . import tables
from .raw_sql import QUEUE, TASK
from .server import Database, benchmark_database, wait_until
from .sizes import SIZES, Size
from .stats import summary

APP_MODULE = "idle_bench_app"
APP_SOURCE = f'''"""The idle-cost benchmark's application (written by benchmarks/idle.py)."""
import os

import sqla_queue as sq

queue = sq.Queue(os.environ["SQLA_QUEUE_BENCH_URL"], load_entrypoints=False)


@queue.task(name="{TASK}", queue="{QUEUE}")
def noop(payload, ctx):
    return None
'''
EXTRA_QUEUE_TASK = '''

@queue.task(name="{TASK}_{n}", queue="{QUEUE}_{n}")
def noop_{n}(payload, ctx):
    return None
'''
APP_NAME = "sqlaq-idle-bench"
POLL_INTERVAL = 1.0  # the worker's default, written out so the report can say it


def run(db: Database, size: Size, log) -> dict:
    # An idle worker needs an empty queue: the section before may leave a backlog (sustained
    # drain's raw reference stops at its time cap), which these workers would otherwise drain.
    tables.reset(db)
    out: dict = {"settle_s": size.idle_settle, "window_s": size.idle_window, "poll_interval_s": POLL_INTERVAL}
    for workers in size.idle_workers:
        figures = measure(db, workers, settle=size.idle_settle, window=size.idle_window)
        out[workers] = figures
        log(f"idle cost, {workers} worker(s): {figures['xact_per_s']:.1f} commits/s in all, "
            f"{figures['xact_per_s_per_worker']:.2f} per worker; CPU per worker "
            f"{figures['cpu_percent']['median']:.2f} % (max {figures['cpu_percent']['max']:.2f} %)")
    return out


def measure(db: Database, workers: int, *, settle: float, window: float, queues: int = 1) -> dict:
    """Start `workers` idle CLI workers serving `queues` queues, let them settle, measure
    `window` seconds, stop them."""
    database = make_url(db.url).database
    with _maintenance(db) as admin, idle_workers(db, workers, queues) as procs:
        if not wait_until(lambda: _ready(admin, database, workers), timeout=60 + 3 * workers, step=0.2):
            raise RuntimeError(f"{workers} idle worker(s) did not connect within the time allowed:\n"
                               + _logs(procs))
        time.sleep(settle)
        xact0, cpu0, t0 = xact_commit(admin, database), [cpu_seconds(p.pid) for p in procs], time.monotonic()
        time.sleep(window)
        xact1, cpu1, t1 = xact_commit(admin, database), [cpu_seconds(p.pid) for p in procs], time.monotonic()
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            raise RuntimeError("an idle worker exited during the measurement:\n" + _logs(procs))
    seconds = t1 - t0
    rate = (xact1 - xact0) / seconds
    return {
        "workers": workers, "queues": queues, "seconds": seconds, "commits": xact1 - xact0,
        "xact_per_s": rate, "xact_per_s_per_worker": rate / workers,
        "cpu_percent": summary(100 * (b - a) / seconds for a, b in zip(cpu0, cpu1)),
    }


@contextmanager
def idle_workers(db: Database, workers: int, queues: int = 1) -> Iterator[list[subprocess.Popen]]:
    """`workers` CLI worker processes on `db`'s queue, stopped (SIGTERM, then SIGKILL) on exit:
    each serves `queues` queues, a task on each, named with ``--queues`` (so a checkout whose
    worker serves only the queues it is told runs the same fleet)."""
    url = make_url(db.sqlalchemy_url).update_query_dict({"application_name": APP_NAME})
    with tempfile.TemporaryDirectory(prefix="sqlaq-idle-") as root:
        extra = range(2, queues + 1)
        source = APP_SOURCE + "".join(EXTRA_QUEUE_TASK.format(TASK=TASK, QUEUE=QUEUE, n=n) for n in extra)
        (Path(root) / f"{APP_MODULE}.py").write_text(source)
        env = {**os.environ, "SQLA_QUEUE_BENCH_URL": url.render_as_string(hide_password=False),
               "SQLA_QUEUE_DISABLE_PLUGIN_AUTOLOAD": "1"}
        command = [sys.executable, "-m", "sqla_queue.cli", "--app", f"{APP_MODULE}:queue", "worker",
                   "--processes", "1", "--queues", ",".join([QUEUE, *(f"{QUEUE}_{n}" for n in extra)]),
                   "--poll-interval", str(POLL_INTERVAL)]
        procs = []
        try:
            for n in range(workers):
                log = open(Path(root) / f"worker-{n}.log", "wb")  # noqa: SIM115 - closed below
                procs.append(subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT))
                log.close()
            yield procs
        finally:
            _stop(procs)


def worker_library() -> str:
    """Where the worker processes import sqla_queue from (they run in a temporary directory,
    with this process's environment)."""
    with tempfile.TemporaryDirectory() as root:
        return subprocess.run([sys.executable, "-c", "import sqla_queue, os; print(os.path.dirname(sqla_queue.__file__))"],
                              cwd=root, capture_output=True, text=True, check=True).stdout.strip()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` (all its threads), from ``/proc/PID/stat``."""
    return parse_proc_stat(Path(f"/proc/{pid}/stat").read_text()) / os.sysconf("SC_CLK_TCK")


def parse_proc_stat(text: str) -> int:
    """``utime + stime`` in clock ticks: fields 14 and 15, counted after the ``(comm)`` field,
    which may itself contain spaces and parentheses."""
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def xact_commit(admin: psycopg.Connection, database: str) -> int:
    admin.execute("SELECT pg_stat_clear_snapshot()")
    return admin.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (database,)).fetchone()[0]


def _ready(admin: psycopg.Connection, database: str, workers: int) -> bool:
    """Every worker has its listener and a pooled connection open: at least two backends each
    (the workers cannot be told apart here, so the count is of the whole fleet)."""
    row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name = %s",
                        (database, APP_NAME)).fetchone()
    return row[0] >= 2 * workers


@contextmanager
def _maintenance(db: Database) -> Iterator[psycopg.Connection]:
    url = make_url(db.url).set(database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(url, autocommit=True) as conn:
        yield conn


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    end = time.monotonic() + 30
    for p in procs:
        try:
            p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _logs(procs: list[subprocess.Popen]) -> str:
    return "\n".join(f"pid {p.pid}: exit code {p.poll()}" for p in procs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.idle", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1, help="idle worker processes (default 1)")
    parser.add_argument("--settle", type=float, default=SIZES["small"].idle_settle,
                        help="seconds between all connected and the first sample")
    parser.add_argument("--window", type=float, default=SIZES["small"].idle_window, help="seconds measured")
    parser.add_argument("--queues", type=int, default=1, help="queues each worker serves, a task on each (default 1)")
    parser.add_argument("--database-url", help="a server to create the database on (default: embedded PostgreSQL 18)")
    args = parser.parse_args(argv)
    with benchmark_database(args.database_url) as db:
        figures = measure(db, args.workers, settle=args.settle, window=args.window, queues=args.queues)
    print(f"worker processes import sqla_queue from {worker_library()}")
    print(f"{args.workers} idle worker(s) serving {args.queues} queue(s), {figures['seconds']:.1f} s: "
          f"{figures['commits']} commits, "
          f"{figures['xact_per_s']:.1f} commits/s ({figures['xact_per_s_per_worker']:.2f} per worker); "
          f"CPU per worker {figures['cpu_percent']['median']:.2f} % of a core "
          f"(min {figures['cpu_percent']['min']:.2f}, max {figures['cpu_percent']['max']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
