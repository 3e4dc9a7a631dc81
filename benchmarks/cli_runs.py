"""sqla_queue as its users run it: fresh operating-system processes of one Python environment (the
``sqla-queue`` CLI worker, the enqueue script) on one database, timed on the database's clock.

The peers section (benchmarks/peers.py) runs them beside pgqueuer and graphile-worker, from the
benchmark's own environment; ``python -m benchmarks compare`` (benchmarks/compare.py) runs them from
two environments, a git ref's and the working tree's, each on a database of its own.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import raw_sql
from .cpu import ServerCpu
from .idle import APP_MODULE
from .peer_install import SCRIPTS
from .raw_sql import QUEUE
from .server import Database

PROCESS_TIMEOUT = 900.0


@dataclass(kw_only=True)
class CliRuns:
    db: Database
    work: Path  # the processes' working directory: logs and the CLI app module
    log: object
    bin_dir: Path = field(default_factory=lambda: Path(sys.executable).parent)  # whose sqla_queue runs
    runs: int = 0

    def __post_init__(self) -> None:
        self.compile_bytecode()

    def compile_bytecode(self) -> None:
        """Write the package's bytecode, as ``pip install`` does for a wheel (and did for the
        peers' packages). An editable checkout run under ``PYTHONDONTWRITEBYTECODE`` (as this
        machine sets it) has none, and every fresh process would compile sqla_queue's sources
        again: some 75 ms of each worker's start-up that no installed user pays."""
        # Run outside any checkout: from this repository's directory, ``python -c`` would find its
        # ``sqla_queue/`` first, whichever environment's package the processes import.
        find = subprocess.run([self.python, "-c", "import os, sqla_queue; print(os.path.dirname(sqla_queue.__file__))"],
                              capture_output=True, text=True, check=True, cwd=os.path.abspath(os.sep))
        subprocess.run([self.python, "-m", "compileall", "-q", find.stdout.strip()], capture_output=True, check=True)

    # commands ---------------------------------------------------------------------------------

    @property
    def python(self) -> str:
        python = self.bin_dir / "python"
        return str(python) if python.exists() else sys.executable

    def sqla_queue_cli(self) -> list[str]:
        script = self.bin_dir / "sqla-queue"
        return [str(script)] if script.exists() else [self.python, "-m", "sqla_queue.cli"]

    def worker_argv(self, concurrency: int, app: str = APP_MODULE) -> list[str]:
        """One ``sqla-queue worker`` process that drains the bench queue and exits."""
        return [*self.sqla_queue_cli(), "--app", f"{app}:queue", "worker", "--processes", "1", "--queues", QUEUE,
                "--concurrency", str(concurrency), "--until-empty"]

    def enqueue_argv(self, jobs: int, batch: int) -> list[str]:
        return [self.python, str(SCRIPTS / "sqla_queue_enqueue.py"), str(jobs), str(batch)]

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "SQLA_QUEUE_BENCH_URL": self.db.sqlalchemy_url,
                "SQLA_QUEUE_DISABLE_PLUGIN_AUTOLOAD": "1", **extra}

    # running ----------------------------------------------------------------------------------

    def run_to_end(self, argv: list[str], *, cwd: Path, env: dict | None = None, what: str) -> tuple[str, float]:
        """Run one process to its end; its stdout and the seconds it took (spawn to exit)."""
        t0 = time.monotonic()
        done = subprocess.run(argv, cwd=cwd, env=env or self.env(), capture_output=True, text=True,
                              timeout=PROCESS_TIMEOUT)
        seconds = time.monotonic() - t0
        if done.returncode != 0:
            raise RuntimeError(f"{what} failed (exit {done.returncode}): {' '.join(argv)}\n"
                               f"{done.stdout[-2000:]}{done.stderr[-4000:]}")
        return done.stdout, seconds

    def start_together(self, commands: list[tuple[list[str], Path, dict]], what: str) -> dict:
        """Start the processes back to back and wait for them all. Returns the database clock
        and this machine's clock just before the first started, and each one's exit time."""
        self.runs += 1
        logs = []
        server = ServerCpu(self.db)
        server_cpu0, children0 = server.sample(), _children_cpu()
        with self.db.connect(autocommit=True) as conn:
            conn.execute(raw_sql.DB_CLOCK)  # a warm connection: the next round trip is the start
            db_start = conn.execute(raw_sql.DB_CLOCK).fetchone()[0]
            wall_start, t0 = time.time(), time.monotonic()
            procs = []
            for n, (argv, cwd, env) in enumerate(commands):
                path = self.work / f"run{self.runs}-{n}.log"
                logs.append(path)
                with open(path, "wb") as out:
                    procs.append(subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT))
        exits = []
        try:
            for p in procs:
                p.wait(timeout=PROCESS_TIMEOUT)
                exits.append(time.monotonic() - t0)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        failed = [(p, path) for p, path in zip(procs, logs) if p.returncode != 0]
        if failed:
            raise RuntimeError(f"{what}: a process failed:\n" + "\n".join(
                f"exit {p.returncode}: {' '.join(map(str, p.args))}\n{path.read_text()[-3000:]}" for p, path in failed))
        return {"db_start": db_start, "wall_start": wall_start, "exit_s": max(exits),
                "client_cpu_s": _children_cpu() - children0,
                "server_cpu_s": ServerCpu.seconds_between(server_cpu0, server.sample())}

    def completion_times(self, db_start) -> list[float]:
        """Seconds from `db_start` to each completed job's ``completed_at`` (database clock)."""
        with self.db.connect() as conn:
            rows = conn.execute(raw_sql.PEER_COMPLETIONS["sqla_queue"], {"start": db_start}).fetchall()
        return [float(r[0]) for r in rows]


def _children_cpu() -> float:
    """User + system seconds of this process's children that have exited and been waited for
    (the workers `start_together` started, once it returns)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def cpu_per_job(clock: dict, jobs: int) -> dict:
    """The workers' and the server's CPU per completed job (µs) over one `start_together` span;
    the server's is None where it cannot be read (a server this machine does not run)."""
    server = clock.get("server_cpu_s")
    return {"client_cpu_us_per_job": clock["client_cpu_s"] / jobs * 1e6 if jobs else None,
            "server_cpu_us_per_job": server / jobs * 1e6 if jobs and server is not None else None}
