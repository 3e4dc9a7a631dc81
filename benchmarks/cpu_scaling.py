"""CPU-bound handlers on one core and on two: ``sqla-queue worker --processes 1`` against
``--processes 2``, side by side.

``python -m benchmarks.cpu_scaling [--jobs 600] [--job-ms 7] [--repeat 3] [--database-url URL]``
calibrates a pure-Python loop to about `--job-ms` milliseconds of CPU a job on this machine, fills
the table with that many pending jobs, and drains them with
``sqla-queue --app benchmarks.cpu_scaling_app:queue worker --until-empty --processes P`` for
P = 1 and 2 in turn, each repetition running both back to back (alternating which goes first),
so the ratio compares runs that shared the machine's state. Each drain is timed from just
before the command starts (the database's clock) to the last ``completed_at``: start-up, the
import of the app, forking and connecting are all counted. It prints one line per run and a
table of the medians with the ratio. The default is an embedded PostgreSQL 18, as for
``python -m benchmarks``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from . import raw_sql

if TYPE_CHECKING:  # the app the workers import (cpu_scaling_app) imports `burn` from here: kept light
    from .server import Database

REPO = Path(__file__).resolve().parents[1]
PROCESSES = (1, 2)
ITERATIONS_ENV = "BENCH_BURN_ITERATIONS"


def burn(iterations: int) -> int:
    """Pure-Python arithmetic: holds the GIL throughout, as a CPU-bound handler does."""
    total = 0
    for i in range(iterations):
        total += i * i % 7
    return total


def calibrate(job_ms: float, samples: int = 15) -> tuple[int, float]:
    """Iterations of `burn` that take about `job_ms` of CPU time here, and the CPU milliseconds
    they took (the median of `samples` runs). CPU time, not wall: other work on the machine
    would otherwise make the jobs shorter."""
    probe = 20_000
    seconds = statistics.median(_timed_burn(probe) for _ in range(samples))
    iterations = max(1, round(probe * job_ms / 1000 / seconds))
    return iterations, statistics.median(_timed_burn(iterations) for _ in range(samples)) * 1000


def _timed_burn(iterations: int) -> float:
    started = time.thread_time()
    burn(iterations)
    return time.thread_time() - started


def drain(db: Database, processes: int, jobs: int, iterations: int, concurrency: int) -> float:
    """Seconds from just before the command starts to the last completion."""
    from . import tables

    tables.reset(db, pending=jobs)
    command = [sys.executable, "-m", "sqla_queue.cli", "--app", "benchmarks.cpu_scaling_app:queue", "worker",
               "--queues", raw_sql.QUEUE, "--processes", str(processes), "--concurrency", str(concurrency),
               "--until-empty", "--log-level", "WARNING"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env.update(SQLA_QUEUE_DATABASE_URL=db.sqlalchemy_url, SQLA_QUEUE_DISABLE_PLUGIN_AUTOLOAD="1",
               **{ITERATIONS_ENV: str(iterations)})
    with db.connect() as conn:
        started = conn.execute(raw_sql.DB_CLOCK).fetchone()[0]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"--processes {processes} exited with {result.returncode}: {result.stderr[-2000:]}")
    with db.connect() as conn:
        done, last, _claims = conn.execute(raw_sql.DRAIN_RESULT).fetchone()
    if done != jobs:
        raise RuntimeError(f"--processes {processes} completed {done} of {jobs} jobs")
    return (last - started).total_seconds()


def measure(db: Database, jobs: int, iterations: int, concurrency: int, repeat: int, log=print) -> dict:
    seconds: dict[int, list[float]] = {p: [] for p in PROCESSES}
    for rep in range(repeat):
        order = PROCESSES if rep % 2 == 0 else tuple(reversed(PROCESSES))
        for processes in order:
            took = drain(db, processes, jobs, iterations, concurrency)
            seconds[processes].append(took)
            log(f"rep {rep + 1} --processes {processes}: {took:6.2f} s, {jobs / took:6.1f} jobs/s")
    return {p: statistics.median(values) for p, values in seconds.items()}


def table(medians: dict, *, jobs: int, job_ms: float, concurrency: int, repeat: int) -> str:
    one, two = medians.get(1, medians.get("1")), medians.get(2, medians.get("2"))
    return "\n".join([
        f"| {jobs:,} jobs of {job_ms:.1f} ms pure-Python CPU, --concurrency {concurrency}, median of {repeat} "
        "| --processes 1 | --processes 2 | 2 / 1 |",
        "|---|---|---|---|",
        f"| seconds, process start to last completion | {one:.2f} | {two:.2f} | {two / one:.2f} |",
        f"| jobs/s | {jobs / one:.1f} | {jobs / two:.1f} | {one / two:.2f}x |",
    ])


JOB_MS = 7.0
CONCURRENCY = 4


def run(db: Database, size, log) -> dict:
    """The ``cpu`` section of ``python -m benchmarks``: the same measurement at the size's
    scale (its drain jobs / 33: 600 at ``full``), with the load average around it."""
    jobs = max(20, size.drain_jobs // 33)
    iterations, job_ms = calibrate(JOB_MS)
    log(f"cpu: calibrated {iterations:,} iterations a job, {job_ms:.2f} ms of CPU")
    load_before = os.getloadavg()[0]
    medians = measure(db, jobs, iterations, CONCURRENCY, size.repeat,
                      log=lambda line: log(f"cpu: {line}"))
    return {"jobs": jobs, "job_ms": job_ms, "concurrency": CONCURRENCY, "repeat": size.repeat,
            "seconds": {str(p): s for p, s in medians.items()},
            "load": [load_before, os.getloadavg()[0]], "cores": os.cpu_count()}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cpu_scaling", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=600, help="jobs per drain (default 600)")
    parser.add_argument("--job-ms", type=float, default=7.0, help="CPU per job, milliseconds (default 7)")
    parser.add_argument("--concurrency", type=int, default=4, help="worker --concurrency (default 4, its own)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions; the medians are reported (default 3)")
    parser.add_argument("--database-url", help="use this server (a database is created and dropped there) "
                        "instead of starting an embedded PostgreSQL 18")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from .server import benchmark_database

    args = parse_args(argv)
    log = lambda line: print(line, file=sys.stderr)  # noqa: E731
    iterations, job_ms = calibrate(args.job_ms)
    log(f"calibrated: {iterations:,} iterations a job, {job_ms:.2f} ms of CPU here; {os.cpu_count()} cores")
    load_before = os.getloadavg()[0]
    with benchmark_database(args.database_url) as db:
        medians = measure(db, args.jobs, iterations, args.concurrency, args.repeat, log)
    print(table(medians, jobs=args.jobs, job_ms=job_ms, concurrency=args.concurrency, repeat=args.repeat))
    # A second process only helps if a second core is free: say how busy the machine was.
    print(f"\nload average (1 min) {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, "
          f"on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
