"""Section 3, drain: pre-enqueued no-op jobs drained by 1 and 2 worker processes at several
concurrencies, and how each compares with the raw-SQL limit at the batch size it used.

The rate is read from the rows: jobs completed divided by the span from the database clock at
the start signal to the last ``completed_at``, so process start-up and shutdown are not counted.
The batch size a drain "used" is jobs per claim statement: every job of one claim shares its
token, which stays on the finished row, so ``count(DISTINCT claim_token)`` is the number of
claims that returned work.
"""

from __future__ import annotations

from . import raw_sql, tables
from .cpu import ServerCpu
from .procs import run_workers
from .server import Database
from .sizes import Size
from .stats import summary
from .tables import ServerCounters


def run(db: Database, size: Size, log) -> dict:
    configs = [(p, c) for p in size.drain_processes for c in size.drain_concurrency]
    runs: dict = {f"{p}x{c}": [] for p, c in configs}
    for rep in range(size.repeat):
        for processes, concurrency in configs:
            out = drain_once(db, size.drain_jobs, processes, concurrency, log=log)
            runs[f"{processes}x{concurrency}"].append(out)
            log(f"drain {processes} proc x concurrency {concurrency} rep {rep + 1}: "
                f"{out['jobs_per_s']:,.0f} jobs/s, batch {out['batch']:.1f}, "
                f"{out['commits_per_job']:.2f} commits/job")
    return {key: _summarise(key, outs) for key, outs in runs.items()}


def drain_once(db: Database, jobs: int, processes: int, concurrency: int, *, options: dict | None = None,
               log=print) -> dict:
    tables.reset(db, pending=jobs)
    cpu, counters = ServerCpu(db), ServerCounters(db)
    marks: dict = {}

    def before_go():
        counters.start()
        marks["cpu0"] = cpu.sample()
        with db.connect() as conn:
            return conn.execute(raw_sql.DB_CLOCK).fetchone()[0]

    def after():
        marks["cpu1"] = cpu.sample()

    result = run_workers(db.url, processes=processes, mode="drain", before_go=before_go, after=after,
                         options={"concurrency": concurrency, **(options or {})})
    server = counters.stop()
    with db.connect() as conn:
        done, last, claims = conn.execute(raw_sql.DRAIN_RESULT).fetchone()
    if done != jobs:  # reported, not fatal: a long run should not die for one bad repetition
        log(f"WARNING: drain {processes}x{concurrency} completed {done} of {jobs} jobs")
    seconds = (last - result["started"]).total_seconds()
    client_cpu = sum(w["cpu_seconds"] for w in result["workers"])
    server_cpu = ServerCpu.seconds_between(marks["cpu0"], marks["cpu1"])
    return {
        "jobs": done,
        "seconds": seconds,
        "jobs_per_s": done / seconds,
        "batch": done / claims if claims else None,
        "claims": claims,
        "commits_per_job": server["commits"] / done,
        "wal_bytes_per_job": server["wal_bytes"] / done,
        "client_cpu_us_per_job": client_cpu / done * 1e6,
        "server_cpu_us_per_job": None if server_cpu is None else server_cpu / done * 1e6,
        "lost": sum(w["summary"]["lost"] for w in result["workers"]),
        "incomplete": done != jobs,
    }


def _summarise(key: str, outs: list[dict]) -> dict:
    processes, concurrency = (int(x) for x in key.split("x"))
    fields = ("jobs_per_s", "batch", "commits_per_job", "wal_bytes_per_job", "client_cpu_us_per_job",
              "server_cpu_us_per_job", "seconds")
    out = {"processes": processes, "concurrency": concurrency, "jobs": outs[0]["jobs"]}
    for name in fields:
        values = [o[name] for o in outs if o[name] is not None]
        out[name] = summary(values)
    return out


def worker_batches(drain: dict) -> list[int]:
    """The batch sizes the drains used (median jobs per claim, rounded), for the raw limit."""
    return sorted({max(1, round(d["batch"]["median"])) for d in drain.values() if d["batch"]["median"]})
