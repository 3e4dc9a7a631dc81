"""Section 3, drain: pre-enqueued no-op jobs drained by 1 and 2 worker processes at several
concurrencies, and how each compares with the raw-SQL limit at the batch size it used.

The rate is read from the rows: jobs completed divided by the span from the database clock at
the start signal to the last ``completed_at``, so process start-up and shutdown are not counted.
The batch size a drain "used" is jobs per claim statement: every job of one claim shares its
token, which stays on the finished row, so ``count(DISTINCT claim_token)`` is the number of
claims that returned work.
"""

from __future__ import annotations

from . import raw, raw_sql, tables
from .cpu import ServerCpu
from .procs import run_workers
from .server import Database
from .sizes import Size, raw_jobs_for
from .stats import summary
from .tables import ServerCounters


def run(db: Database, size: Size, log) -> dict:
    """Each drain repetition is followed at once by the raw-SQL limit at the batch size that
    drain used (the first raw method, every client count), so each ratio compares two runs
    that shared the machine's state: on a noisy machine minutes apart is too far."""
    configs = [(p, c) for p in size.drain_processes for c in size.drain_concurrency]
    runs: dict = {f"{p}x{c}": [] for p, c in configs}
    paired: dict = {f"{p}x{c}": {n: [] for n in size.raw_clients} for p, c in configs}
    method = raw.methods(db)[0]
    for rep in range(size.repeat):
        for processes, concurrency in configs:
            key = f"{processes}x{concurrency}"
            out = drain_once(db, size.drain_jobs, processes, concurrency, log=log)
            runs[key].append(out)
            batch = max(1, round(out["batch"] or 1))
            limits = {n: raw.claim_run(db, method, n, batch, raw_jobs_for(size, batch)) for n in size.raw_clients}
            for n, rate in limits.items():
                paired[key][n].append(rate)
            log(f"drain {processes} proc x concurrency {concurrency} rep {rep + 1}: "
                f"{out['jobs_per_s']:,.0f} jobs/s, batch {out['batch']:.1f}, "
                f"{out['commits_per_job']:.2f} commits/job; raw {method} at batch {batch}: "
                + ", ".join(f"{r:,.0f} ({n} client{'s' if n > 1 else ''})" for n, r in limits.items()))
    out = {key: _summarise(key, outs) for key, outs in runs.items()}
    for key, per_clients in paired.items():
        out[key]["raw_paired"] = {"method": method,
                                  "clients": {n: summary(v) for n, v in per_clients.items()}}
    return out


def drain_once(db: Database, jobs: int, processes: int, concurrency: int, *, options: dict | None = None,
               log=print, handler: str = "sync", otel: bool = False) -> dict:
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
                         options={"concurrency": concurrency, **(options or {})}, handler=handler, otel=otel)
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
        "wall_seconds": max(w["wall_seconds"] for w in result["workers"]),
        "jobs_per_s": done / seconds,
        "batch": done / claims if claims else None,
        "claims": claims,
        "commits_per_job": server["commits"] / done,
        "wal_bytes_per_job": server["wal_bytes"] / done,
        "client_cpu_us_per_job": client_cpu / done * 1e6,
        "server_cpu_us_per_job": None if server_cpu is None else server_cpu / done * 1e6,
        "lost": sum(w["summary"]["lost"] for w in result["workers"]),
        "plugins": result["workers"][0]["plugins"],
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
