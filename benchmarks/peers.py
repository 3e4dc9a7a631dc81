"""Section 9, peers (``--peers``): sqla_queue beside pgqueuer and graphile-worker on the same
server, the same no-op jobs and the same clock, each run the way its users run it.

Every worker here is a fresh operating-system process started from its own command line:
``sqla-queue --app APP worker --until-empty`` (the *CLI rows*: every configuration of section 3
again, timed from process start), ``pgq run FACTORY --mode drain`` and ``graphile-worker --once``,
the peers from their own environments (benchmarks/peer_install.py: pinned versions under a
cache directory), their schemas installed by their own tools (``pgq install``, graphile-worker's
migration on ``--schema-only``).

The clock runs from just before the first process is started to the last completion:

* sqla_queue: ``max(completed_at)`` of the job rows (database clock);
* pgqueuer: ``max(created)`` of its ``pgqueuer_log`` rows with status ``successful`` (it deletes
  the job and logs the outcome in one statement; database clock);
* graphile-worker deletes a completed job and keeps no completion time, so its own events are
  its completion log: ``job:complete`` for each job, and ``pool:release``, which it emits once
  its pool has finished and the completion batcher has flushed; the last completion is the
  latest ``pool:release`` (or ``job:complete``, if later). These are the system clock of this
  machine, which the workers and, with the embedded server, the database share.

Beside them, the *raw limit* (`RAW`): the same drains by a bare Python loop on sqla_queue's table
(benchmarks/peer_scripts/raw_python_drain.py), what any Python worker here is bounded by; the
targets say of each missed one whether it lies beyond that bound or within it.

*Start-up* is process start to the first completion. The *steady rate* leaves out start-up and
the tail: completions between the 10th and the 90th percentile of the completion times, over
the time between them. Enqueue runs in a fresh process of each system (its own script, its own
bulk API): N jobs in calls of 1,000, and a single job; the script times itself from just before
it builds its client (so its first connection counts) to the last call's return, and the whole
process (interpreter start and imports included) is timed from outside as well.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import raw_sql, ref_env, tables
from .idle import APP_MODULE, APP_SOURCE
from .latency import POLL_INTERVAL, REST
from .cli_runs import CliRuns, cpu_per_job
from .peer_install import SCRIPTS, PeerEnv, install_graphile_worker, install_pgqueuer
from .raw_sql import QUEUE
from .server import Database, wait_until
from .sizes import Size
from .stats import percentile, summary

SYSTEMS = ("sqla_queue", "pgqueuer", "graphile-worker")
LATENCY_APP = "latency_bench_app"
LATENCY_APP_SOURCE = f'''"""The peers section's wake-up latency app (written by benchmarks/peers.py): the no-op task
that appends "<payload i> <epoch seconds>" to $BENCH_STARTS_OUT when it starts."""
import os
import time

import sqla_queue as sq

queue = sq.Queue(os.environ["SQLA_QUEUE_BENCH_URL"], load_entrypoints=False)


@queue.task(name="noop", queue="{QUEUE}")
def noop(payload, ctx):
    with open(os.environ["BENCH_STARTS_OUT"], "a") as out:
        out.write(f"{{payload['i']}} {{time.time()}}\\n")
'''
BULK_BATCH = 1_000

# Each peer's drains: equal settings (1 and 2 processes, 10 jobs at a time) and its best
# documented configuration for many short jobs, run with one process per core of this 2-core
# class of machine. pgqueuer: its performance-tuning guide raises batch_size for jobs shorter
# than a second (concurrency stays its default: no cap on tasks). graphile-worker: the
# configuration of its own performance page (concurrentJobs 24, maxPoolSize 25, localQueue
# size 500, completeJobBatchDelay and failJobBatchDelay 0).
PGQUEUER_DRAINS = {
    "1x10": {"processes": 1, "batch_size": 10},
    "2x10": {"processes": 2, "batch_size": 10},
    "defaults": {"processes": 1},  # `pgq run` as its quick start shows it: no tuning flags
    "best": {"processes": 2, "batch_size": 100},
}
DEFAULTS = "defaults"
"""The row of each system's worker command with no tuning flags, as a user first runs it:
``sqla-queue worker`` (one process per core, each forking its workers) against ``pgq run``."""
# sqla_queue's own configuration for many short jobs (docs/how-to/run-workers.md, "Many short
# jobs"): one process per core, a high --concurrency so each round claims and completes many
# jobs; measured beside its equal-settings rows.
SQLA_QUEUE_BEST = (2, 200)
GRAPHILE_DRAINS = {
    "1x10": {"processes": 1, "jobs": 10},
    "2x10": {"processes": 2, "jobs": 10},
    "best": {"processes": 2, "jobs": 24, "local_queue": 500, "complete_batch_delay": 0, "max_pool_size": 25},
}
RAW = "raw"
"""The raw limit of a Python worker on sqla_queue's table (peer_scripts/raw_python_drain.py): the
import floor, one psycopg connection and the reference claim + completion, no handler, claiming
500 at a time after a first claim of 10 (graphile-worker's best fetches up to 500 ahead; sqla_queue's worker claims up to
its concurrency plus the prefetch, whatever its --concurrency). With 1 process it bounds the
rows of one worker process, with 2 those of two: a worker's concurrency is its handler threads,
and the raw loop runs no handler."""
RAW_DRAINS = {
    "1x500": {"processes": 1, "batch": 500},
    "2x500": {"processes": 2, "batch": 500},
}
RAW_FOR = {"1x10": "1x500", "2x10": "2x500", "best": "2x500"}
"""The raw row that bounds each side-by-side drain: the one with as many processes."""


# -- pure pieces (tests/benchmarks/test_peers_section.py) -----------------------------------------

def steady_rate(times: list[float]) -> float | None:
    """Completions per second between the 10th and 90th percentile of the completion times
    (seconds, any origin): start-up and the tail left out."""
    if len(times) < 10:
        return None
    ordered = sorted(times)
    low, high = percentile(ordered, 10), percentile(ordered, 90)
    if high <= low:
        return None
    done = sum(1 for t in ordered if low <= t <= high)
    return (done - 1) / (high - low)


def completion_figures(times: list[float], expected: int, *, last: float | None = None) -> dict:
    """One drain from its completion times (seconds since the first process started). `last`
    overrides the last completion (graphile-worker's ``pool:release``)."""
    if not times:
        raise ValueError(f"no completions recorded (expected {expected})")
    ordered = sorted(times)
    end = max(ordered[-1], last) if last is not None else ordered[-1]
    return {
        "jobs": len(ordered), "incomplete": len(ordered) != expected,
        "seconds": end, "jobs_per_s": len(ordered) / end,
        "startup_s": ordered[0], "steady_per_s": steady_rate(ordered),
    }


def parse_graphile_events(texts: list[str], spawned_at: float) -> tuple[list[float], float | None]:
    """The completion logs of graphile-worker processes (benchmarks/peer_scripts/graphile/
    graphile.config.js writes one per process: epoch milliseconds) as seconds since
    `spawned_at` (epoch seconds): every ``job:complete``, and the latest ``pool:release``."""
    times: list[float] = []
    released: list[float] = []
    for text in texts:
        data = json.loads(text)
        times += [ms / 1000 - spawned_at for ms in data["completed"]]
        released += [ms / 1000 - spawned_at for ms in data["released"]]
    return times, max(released) if released else None


def parse_starts(text: str) -> dict[int, float]:
    """A starts file (``<i> <epoch seconds>`` per line, written by each system's timed no-op
    task): the first start of each job."""
    starts: dict[int, float] = {}
    for line in text.splitlines():
        if line.strip():
            i, at = line.split()
            starts.setdefault(int(i), float(at))
    return starts


def wakeup_latencies(sent: dict[int, tuple[float, float]], starts: dict[int, float]) -> dict:
    """Milliseconds from each enqueue call's return (the job committed) and from its start to
    the handler's start, for the jobs `sent` (``i -> (before the call, after it returned)``)."""
    missing = sorted(set(sent) - set(starts))
    if missing:
        raise ValueError(f"no handler start recorded for job(s) {missing[:10]}")
    return {"after_commit_ms": [(starts[i] - after) * 1e3 for i, (_, after) in sorted(sent.items())],
            "from_call_ms": [(starts[i] - before) * 1e3 for i, (before, _) in sorted(sent.items())]}


def parse_enqueue_output(stdout: str) -> dict:
    """The last line an enqueue script printed: ``{"jobs", "batch", "seconds", ...}``."""
    lines = [line for line in stdout.strip().splitlines() if line.startswith("{")]
    if not lines:
        raise ValueError(f"the enqueue script printed no result: {stdout[-500:]!r}")
    out = json.loads(lines[-1])
    if not out.get("seconds") or out["seconds"] <= 0:
        raise ValueError(f"the enqueue script reported no time: {out}")
    return out


def describe_sqla_queue(processes: int, concurrency: int) -> str:
    return (f"{processes} x `sqla-queue --app APP worker --queues {QUEUE} --concurrency {concurrency} "
            "--until-empty`")


def describe_sqla_queue_defaults() -> str:
    return ("1 x `sqla-queue --app APP worker --until-empty` (no tuning flags: one worker process per usable "
            "core, --concurrency 4, adaptive prefetch)")


def describe_pgqueuer(config: dict) -> str:
    batch = f" --batch-size {config['batch_size']}" if "batch_size" in config else ""
    return f"{config['processes']} x `pgq run pgqueuer_app:create_pgqueuer --mode drain{batch}`"


def describe_raw(config: dict) -> str:
    return (f"{config['processes']} x `python raw_python_drain.py {config['batch']}` (the import floor, then psycopg "
            f"and the reference claim + completion of section 1, {config['batch']} jobs at a time after a first claim "
            "of 10, no handler)")


def describe_graphile(config: dict) -> str:
    extras = []
    if "local_queue" in config:
        extras.append(f"localQueue.size {config['local_queue']}")
    if "complete_batch_delay" in config:
        extras.append(f"complete/failJobBatchDelay {config['complete_batch_delay']}")
    if "max_pool_size" in config:
        extras.append(f"maxPoolSize {config['max_pool_size']}")
    return (f"{config['processes']} x `graphile-worker --once --jobs {config['jobs']}`"
            + (f" ({', '.join(extras)})" if extras else ""))


# -- the section -----------------------------------------------------------------------------------

@dataclass(kw_only=True)
class Peers(CliRuns):
    """The CLI runs of benchmarks/cli_runs.py from the benchmark's own environment, beside the
    peers' own commands on the same database."""

    pgqueuer: PeerEnv
    graphile: PeerEnv

    def env(self, **extra: str) -> dict[str, str]:
        return {**super().env(), "PGDSN": self.db.url, "DATABASE_URL": self.db.url, "PYTHONDONTWRITEBYTECODE": "1",
                **extra}

    # schemas and table states -----------------------------------------------------------------

    def install_schemas(self) -> None:
        self.run_to_end([str(self.pgqueuer.pgq), "install"], cwd=self.work, what="pgq install")
        bench = self.graphile.root / "bench"
        self.run_to_end([str(self.graphile.graphile_cli), "--schema-only", "-C", str(bench / "graphile.config.js")],
                        cwd=bench, what="graphile-worker --schema-only")

    def empty_all(self) -> None:
        """Every system's jobs gone (so nothing else is pending while one is measured)."""
        tables.reset(self.db)
        with self.db.connect(autocommit=True) as conn:
            for statement in raw_sql.PEER_RESET:
                conn.execute(statement)
            tables.settle(conn)

    def count(self, system: str) -> int:
        with self.db.connect() as conn:
            return conn.execute(raw_sql.PEER_COUNT[system]).fetchone()[0]

    # enqueue ----------------------------------------------------------------------------------

    def enqueue_command(self, system: str, jobs: int, batch: int) -> tuple[list[str], Path]:
        if system == "sqla_queue":
            return self.enqueue_argv(jobs, batch), self.work
        if system == "pgqueuer":
            return [str(self.pgqueuer.python), str(SCRIPTS / "pgqueuer_enqueue.py"), str(jobs), str(batch)], self.work
        bench = self.graphile.root / "bench"
        return [shutil.which("node") or "node", str(bench / "enqueue.js"), str(jobs), str(batch)], bench

    def enqueue(self, system: str, jobs: int, batch: int) -> dict:
        """`jobs` jobs in calls of `batch` from a fresh process of `system`, into its empty table."""
        self.empty_all()
        argv, cwd = self.enqueue_command(system, jobs, batch)
        stdout, wall = self.run_to_end(argv, cwd=cwd, what=f"{system} enqueue")
        out = parse_enqueue_output(stdout)
        found = self.count(system)
        if found != jobs:
            raise RuntimeError(f"{system} enqueue: {found} jobs in its table, expected {jobs}")
        return {**out, "process_seconds": wall}

    def fill(self, system: str, jobs: int) -> None:
        """`jobs` pending jobs for a drain, each system's own way (untimed), then vacuumed."""
        if system == "sqla_queue":
            self.empty_all()
            tables.reset(self.db, pending=jobs)
            return
        self.enqueue(system, jobs, min(BULK_BATCH, jobs))
        with self.db.connect(autocommit=True) as conn:
            conn.execute(raw_sql.PEER_SETTLE[system])
            conn.execute(raw_sql.CHECKPOINT)

    # drains -----------------------------------------------------------------------------------

    def drain_sqla_queue(self, jobs: int, processes: int, concurrency: int) -> dict:
        argv = self.worker_argv(concurrency)
        return self._drain_from_table("sqla_queue", jobs, [(argv, self.work, self.env())] * processes)

    def drain_sqla_queue_defaults(self, jobs: int) -> dict:
        """``sqla-queue worker`` with no tuning flags: one command, which starts its own
        worker processes (one per usable core)."""
        argv = [*self.sqla_queue_cli(), "--app", f"{APP_MODULE}:queue", "worker", "--until-empty"]
        return self._drain_from_table("sqla_queue", jobs, [(argv, self.work, self.env())])

    def drain_pgqueuer(self, jobs: int, config: dict) -> dict:
        argv = [str(self.pgqueuer.pgq), "run", "pgqueuer_app:create_pgqueuer", "--mode", "drain"]
        if "batch_size" in config:
            argv += ["--batch-size", str(config["batch_size"])]
        return self._drain_from_table("pgqueuer", jobs, [(argv, SCRIPTS, self.env())] * config["processes"])

    def _drain_from_table(self, system: str, jobs: int, commands: list) -> dict:
        """Fill, run the workers, read the completion times the system keeps in its tables."""
        self.fill(system, jobs)
        clock = self.start_together(commands, f"{system} drain")
        with self.db.connect() as conn:
            rows = conn.execute(raw_sql.PEER_COMPLETIONS[system], {"start": clock["db_start"]}).fetchall()
        return {**completion_figures([float(r[0]) for r in rows], jobs), "exit_s": clock["exit_s"],
                **cpu_per_job(clock, len(rows))}

    def drain_raw(self, jobs: int, config: dict) -> dict:
        """The raw limit (`RAW`) from process start, on sqla_queue's table and clock."""
        argv = [self.python, str(SCRIPTS / "raw_python_drain.py"), str(config["batch"])]
        return self._drain_from_table("sqla_queue", jobs, [(argv, self.work, self.env())] * config["processes"])

    def drain_graphile(self, jobs: int, config: dict) -> dict:
        self.fill("graphile-worker", jobs)
        bench = self.graphile.root / "bench"
        argv = [str(self.graphile.graphile_cli), "--once", "--jobs", str(config["jobs"]),
                "-C", str(bench / "graphile.config.js")]
        settings = {"BENCH_LOCAL_QUEUE_SIZE": config.get("local_queue"),
                    "BENCH_COMPLETE_BATCH_DELAY": config.get("complete_batch_delay"),
                    "BENCH_MAX_POOL_SIZE": config.get("max_pool_size")}
        outs = [self.work / f"graphile-events-{self.runs + 1}-{n}.json" for n in range(config["processes"])]
        commands = [(argv, bench, self.env(BENCH_EVENTS_OUT=str(out),
                                           **{k: str(v) for k, v in settings.items() if v is not None}))
                    for out in outs]
        clock = self.start_together(commands, "graphile-worker --once")
        times, released = parse_graphile_events([out.read_text() for out in outs], clock["wall_start"])
        left = self.count("graphile-worker")
        if left:
            self.log(f"WARNING: graphile-worker left {left} jobs in its table")
        return {**completion_figures(times, jobs, last=released), "exit_s": clock["exit_s"],
                **cpu_per_job(clock, len(times))}


    # idle wake-up latency ----------------------------------------------------------------------

    def latency(self, system: str, jobs: int, rng: random.Random) -> dict:
        """One idle worker process of `system` (started from its command line, LISTEN on as
        shipped) and one long-lived enqueuer of the same system; each job is enqueued once the
        previous one has started and the worker has then rested (`REST`, as section 4)."""
        self.empty_all()
        self.runs += 1
        starts_path = self.work / f"starts-{self.runs}.txt"
        starts_path.write_text("")
        env = self.env(BENCH_STARTS_OUT=str(starts_path))
        bench = self.graphile.root / "bench"
        if system == "sqla_queue":
            worker = ([*self.sqla_queue_cli(), "--app", f"{LATENCY_APP}:queue", "worker", "--processes", "1", "--queues", QUEUE,
                       "--concurrency", "10", "--poll-interval", f"{POLL_INTERVAL}s"], self.work)
            enqueuer = ([self.python, str(SCRIPTS / "sqla_queue_enqueuer.py")], self.work)
        elif system == "pgqueuer":
            worker = ([str(self.pgqueuer.pgq), "run", "pgqueuer_app:create_pgqueuer"], SCRIPTS)
            enqueuer = ([str(self.pgqueuer.python), str(SCRIPTS / "pgqueuer_enqueuer.py")], self.work)
        else:
            worker = ([str(self.graphile.graphile_cli), "--jobs", "10", "-C", str(bench / "graphile.config.js")], bench)
            enqueuer = ([shutil.which("node") or "node", str(bench / "enqueuer.js")], bench)
        log_path = self.work / f"latency-{self.runs}.log"
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(worker[0], cwd=worker[1], env=env, stdout=out, stderr=subprocess.STDOUT)
        feeder = subprocess.Popen(enqueuer[0], cwd=enqueuer[1], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        sent: dict[int, tuple[float, float]] = {}

        def started(i: int, timeout: float) -> None:
            if not wait_until(lambda: i in parse_starts(starts_path.read_text()), timeout=timeout, step=0.005):
                raise RuntimeError(f"{system} latency: job {i} never started (worker exit code {proc.poll()}):\n"
                                   + log_path.read_text()[-3000:])

        def send(i: int) -> tuple[float, float]:
            feeder.stdin.write(f"{i}\n")
            feeder.stdin.flush()
            reply = feeder.stdout.readline().split()
            if len(reply) != 3 or int(reply[0]) != i:
                raise RuntimeError(f"{system} latency: the enqueuer answered {reply!r} for job {i}")
            return float(reply[1]), float(reply[2])

        try:
            if feeder.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{system} latency: the enqueuer did not start")
            send(0)  # warm-up: the worker is up, connected and listening once job 0 has started
            started(0, timeout=120)
            for i in range(1, jobs + 1):
                time.sleep(rng.uniform(*REST))
                sent[i] = send(i)
                started(i, timeout=30)
        finally:
            feeder.stdin.close()
            feeder.wait(timeout=30)
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        return wakeup_latencies(sent, parse_starts(starts_path.read_text()))


def run(db: Database, size: Size, log) -> dict:
    pgq, graphile = install_pgqueuer(log), install_graphile_worker(log)
    jobs = size.drain_jobs
    cli_configs = [(p, c) for p in size.drain_processes for c in size.drain_concurrency]
    cli_configs += [SQLA_QUEUE_BEST] if SQLA_QUEUE_BEST not in cli_configs else []
    drains: dict = {"sqla_queue": {**{f"{p}x{c}": [] for p, c in cli_configs}, DEFAULTS: []},
                    "pgqueuer": {k: [] for k in PGQUEUER_DRAINS}, "graphile-worker": {k: [] for k in GRAPHILE_DRAINS},
                    RAW: {k: [] for k in RAW_DRAINS}}
    enqueues: dict = {s: {"bulk": [], "single": []} for s in SYSTEMS}
    latencies: dict = {s: {"p50_ms": [], "p99_ms": [], "call_p50_ms": [], "samples_ms": []} for s in SYSTEMS}
    rng = random.Random(7)
    floors: list[float] = []
    with tempfile.TemporaryDirectory(prefix="sqlaq-peers-") as root:
        work = Path(root)
        (work / f"{APP_MODULE}.py").write_text(APP_SOURCE)
        (work / f"{LATENCY_APP}.py").write_text(LATENCY_APP_SOURCE)
        # sqla_queue as pip installs it: a venv of its own (as `compare` builds each side), not an
        # editable install, whose import hook every process start would pay and no user does.
        bin_dir = ref_env.tree_environment(work / "sqla-queue-venv")
        peers = Peers(db=db, pgqueuer=pgq, graphile=graphile, work=work, log=log, bin_dir=bin_dir)
        peers.install_schemas()
        for rep in range(size.repeat):
            floors.append(import_floor(peers.python))
            log(f"peers: import floor rep {rep + 1}: {floors[-1] * 1000:.0f} ms")
            for system in SYSTEMS:  # bulk enqueue, then a single job, each from a fresh process
                bulk = peers.enqueue(system, jobs, min(BULK_BATCH, jobs))
                single = peers.enqueue(system, 1, 1)
                enqueues[system]["bulk"].append(bulk)
                enqueues[system]["single"].append(single)
                log(f"peers: {system} enqueue rep {rep + 1}: {jobs:,} in calls of {min(BULK_BATCH, jobs):,} "
                    f"{jobs / bulk['seconds']:,.0f} jobs/s; one job {single['seconds'] * 1000:.1f} ms "
                    f"(process {single['process_seconds'] * 1000:.0f} ms)")
            # Equal settings side by side, then the rest of the CLI rows, then each one's best.
            order = [("sqla_queue", "1x10"), ("pgqueuer", "1x10"), ("graphile-worker", "1x10"),
                     ("sqla_queue", "2x10"), ("pgqueuer", "2x10"), ("graphile-worker", "2x10"),
                     ("sqla_queue", DEFAULTS), ("pgqueuer", DEFAULTS),
                     *[("sqla_queue", k) for k in drains["sqla_queue"] if k not in ("1x10", "2x10", DEFAULTS)],
                     ("pgqueuer", "best"), ("graphile-worker", "best"),
                     *[(RAW, k) for k in RAW_DRAINS]]
            for system, key in order:
                if key not in drains[system]:
                    continue
                if system == "sqla_queue" and key == DEFAULTS:
                    out = peers.drain_sqla_queue_defaults(jobs)
                elif system == "sqla_queue":
                    p, c = (int(x) for x in key.split("x"))
                    out = peers.drain_sqla_queue(jobs, p, c)
                elif system == "pgqueuer":
                    out = peers.drain_pgqueuer(jobs, PGQUEUER_DRAINS[key])
                elif system == RAW:
                    out = peers.drain_raw(jobs, RAW_DRAINS[key])
                else:
                    out = peers.drain_graphile(jobs, GRAPHILE_DRAINS[key])
                if out["incomplete"]:
                    log(f"WARNING: {system} {key} completed {out['jobs']} of {jobs} jobs")
                drains[system][key].append(out)
                log(f"peers: {system} drain {key} rep {rep + 1}: {out['jobs_per_s']:,.0f} jobs/s from process "
                    f"start (steady {out['steady_per_s'] or 0:,.0f}, first completion after {out['startup_s']:.2f} s)")
            for system in SYSTEMS:
                lat = peers.latency(system, size.peers_latency_jobs, rng)
                after, call = lat["after_commit_ms"], lat["from_call_ms"]
                latencies[system]["p50_ms"].append(percentile(after, 50))
                latencies[system]["p99_ms"].append(percentile(after, 99))
                latencies[system]["call_p50_ms"].append(percentile(call, 50))
                latencies[system]["samples_ms"] += after
                log(f"peers: {system} idle wake-up rep {rep + 1}: after commit p50 {percentile(after, 50):.2f} ms, "
                    f"p99 {percentile(after, 99):.2f} ms")
        peers.empty_all()
    return {
        "jobs": jobs, "bulk_batch": min(BULK_BATCH, jobs), "import_floor_s": summary(floors),
        "versions": {"pgqueuer": pgq.versions, "graphile-worker": graphile.versions},
        "configs": {
            "sqla_queue": {**{f"{p}x{c}": describe_sqla_queue(p, c) for p, c in cli_configs},
                           DEFAULTS: describe_sqla_queue_defaults()},
            "pgqueuer": {k: describe_pgqueuer(v) for k, v in PGQUEUER_DRAINS.items()},
            "graphile-worker": {k: describe_graphile(v) for k, v in GRAPHILE_DRAINS.items()},
            RAW: {k: describe_raw(v) for k, v in RAW_DRAINS.items()},
        },
        "drain": {s: {k: _summarise(v) for k, v in per.items()} for s, per in drains.items()},
        "enqueue": {s: {"bulk": {"jobs_per_s": summary(jobs / r["seconds"] for r in e["bulk"]),
                                 "process_seconds": summary(r["process_seconds"] for r in e["bulk"])},
                        "single": {"call_ms": summary(r["seconds"] * 1000 for r in e["single"]),
                                   "process_ms": summary(r["process_seconds"] * 1000 for r in e["single"])}}
                    for s, e in enqueues.items()},
        "latency": {"jobs": size.peers_latency_jobs, "rest_s": list(REST), "sqla_queue_poll_interval_s": POLL_INTERVAL,
                    **{s: {**{k: summary(v) for k, v in lat.items() if k != "samples_ms"},
                           "samples_ms": lat["samples_ms"]} for s, lat in latencies.items()}},
    }


# What any worker of a SQLAlchemy application on psycopg imports before it can connect: the two
# packages and the dialect `create_engine` loads. The worker path imports no ORM
# (tests/cli/test_worker_imports.py).
IMPORT_FLOOR = "import sqlalchemy, psycopg, sqlalchemy.dialects.postgresql.psycopg"


def import_floor(python: str = sys.executable) -> float:
    """Seconds from spawning a bare interpreter of sqla_queue's environment to the end of its
    imports of what any worker of a SQLAlchemy application imports before sqla_queue does
    anything: the floor under the CLI worker's start-up on this machine. The interpreter's exit,
    which no worker's start-up waits for, is left out: the child reports the time its imports
    ended (this machine's clock, the parent's too)."""
    t0 = time.time()
    done = subprocess.run([python, "-c", f"{IMPORT_FLOOR}; import time; print(time.time())"],
                          check=True, capture_output=True, text=True)
    return float(done.stdout.split()[-1]) - t0


def _summarise(outs: list[dict]) -> dict:
    fields = ("jobs_per_s", "steady_per_s", "startup_s", "seconds", "exit_s", "client_cpu_us_per_job",
              "server_cpu_us_per_job")
    out = {name: summary(o[name] for o in outs if o.get(name) is not None) for name in fields}
    out["jobs"] = outs[0]["jobs"] if outs else 0
    out["incomplete"] = any(o["incomplete"] for o in outs)
    return out
