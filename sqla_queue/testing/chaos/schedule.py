"""One seed, one schedule: the workload (what each job is) and the faults (what happens to the
processes and the server, and when), drawn from a `random.Random` seeded by the seed alone.

Nothing here looks at the machine, the clock or the database, so the same seed and job count
give the same schedule on every run and every machine: a failing seed's schedule is replayed
exactly. The interleaving of real processes around it is not deterministic; a replay applies
the same faults at the same offsets to the same workload.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass

# Job kinds: a plain job; one with an idempotency key (sometimes another job's key, so two
# enqueues share one live job); one that fails its first attempts (some fail for good); one that
# runs longer than the lease renewal period; one whose effect is written in ctx.transaction();
# a pausing one: its first attempt stops its own worker process (SIGSTOP) inside
# ctx.transaction(), after writing its effect and before the commit, for longer than the lease,
# while another worker runs its next attempt; the runner resumes it (a stale claim, on purpose).
# And the clock's: a scheduled job (enqueued with a delay, due during the faults) and a snoozing
# one (it snoozes a few times for a fraction of a second before it returns).
KINDS = ("plain", "idempotent", "failing", "long", "transaction", "pausing", "scheduled", "snoozing")
KIND_WEIGHTS = (3, 2, 2, 2, 3, 1, 2, 2)
APP_KIND = "app"  # --app: every job is the app's own, made by its `job(rng, n)`

# Fault kinds, each aimed at a slot the runner keeps alive (a killed process is started again).
FAULTS = (
    "kill_worker",          # SIGKILL a single-process `sqla-queue worker`
    "stop_worker",          # SIGSTOP it, SIGCONT `duration` seconds later
    "kill_supervisor",      # SIGKILL the `--processes 2` supervisor (its children get SIGTERM)
    "stop_supervisor",      # SIGSTOP the supervisor and its children, SIGCONT later
    "terminate_workers",    # pg_terminate_backend of every worker backend
    "terminate_enqueuers",  # pg_terminate_backend of every enqueuer backend
    "kill_enqueuer",        # SIGKILL an enqueuer, whatever it is doing (mid-commit included)
    "restart_server",       # pg_ctl restart -m immediate of the runner's own PostgreSQL
    "cut_network",          # the workers' proxy closes every open connection
    "stall_network",        # the proxy stops forwarding (sockets stay open) for `duration` seconds
    "refuse_network",       # the proxy closes new connections too, for `duration` seconds
    "cpu_storm",            # busy processes, twice the CPUs, for `duration` seconds: every timer
                            # (lease renewals, heartbeats, polls, the enqueuers' pacing) runs late
)
FAULT_WEIGHTS = (4, 4, 2, 3, 3, 2, 2, 1, 2, 2, 1, 2)

WORKERS = 2      # single-process worker slots
ENQUEUERS = 2    # enqueuer slots
LEASE = 2.0      # seconds: the workers' --lease
WINDOW = 6.0     # seconds after the start in which faults happen
MAX_ATTEMPTS = 25  # for jobs meant to succeed: kills and fences use attempts up too


@dataclass(frozen=True)
class Item:
    """One enqueue the workload asks for; `n` is its place in the workload."""

    n: int
    kind: str
    enqueuer: int
    key: str | None = None
    fail_attempts: int = 0
    max_attempts: int = MAX_ATTEMPTS
    sleep: float = 0.0
    pause: float = 0.0  # pausing: seconds its first attempt's worker stays stopped
    delay: float = 0.0  # scheduled: seconds after the enqueue that it is due
    snoozes: int = 0    # snoozing: how often it snoozes before it returns
    snooze: float = 0.0  # snoozing: seconds of each snooze


@dataclass(frozen=True)
class Fault:
    at: float          # seconds after the workers and enqueuers started
    kind: str
    slot: int = 0      # which worker or enqueuer
    duration: float = 0.0  # SIGSTOP: seconds until SIGCONT; SIGKILL: seconds until the restart


@dataclass(frozen=True)
class Schedule:
    seed: int
    jobs: int
    items: tuple[Item, ...]
    faults: tuple[Fault, ...]

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def make_schedule(seed: int, jobs: int, *, app: bool = False) -> Schedule:
    """The schedule of `seed` over `jobs` jobs (string seeds: stable across Python versions).
    The faults have a generator of their own: a seed hurts the built-in workload and an --app's
    jobs (`app`: each item only a place, the app makes the job) the same way."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    rng = random.Random(f"sqla_queue-chaos-{seed}")
    items = tuple(Item(n, APP_KIND, n % ENQUEUERS) if app else _item(rng, seed, n) for n in range(jobs))
    hurt = random.Random(f"sqla_queue-chaos-{seed}-faults")
    faults = sorted((_fault(hurt) for _ in range(hurt.randint(3, 8))), key=lambda f: f.at)
    return Schedule(seed=seed, jobs=jobs, items=items, faults=tuple(faults))


def _item(rng: random.Random, seed: int, n: int) -> Item:
    kind = rng.choices(KINDS, KIND_WEIGHTS)[0]
    enqueuer = n % ENQUEUERS
    if kind == "idempotent":
        shared = n > 0 and rng.random() < 0.3
        return Item(n, kind, enqueuer, key=f"chaos-{seed}-{rng.randrange(n) if shared else n}")
    if kind == "failing":
        for_good = rng.random() < 0.3
        return Item(n, kind, enqueuer, fail_attempts=rng.randint(1, 3), max_attempts=1 if for_good else MAX_ATTEMPTS)
    if kind == "pausing":  # resumed while the next attempt (sleeping longer still) holds the job
        return Item(n, kind, enqueuer, pause=round(rng.uniform(2 * LEASE + 1, 2 * LEASE + 2), 2),
                    sleep=round(rng.uniform(LEASE + 2.5, LEASE + 3.5), 2))
    if kind == "scheduled":  # due somewhere in the fault window, or just after it
        return Item(n, kind, enqueuer, delay=round(rng.uniform(0.1, 3.0), 2), sleep=round(rng.uniform(0.02, 0.4), 3))
    if kind == "snoozing":
        return Item(n, kind, enqueuer, snoozes=rng.randint(1, 3), snooze=round(rng.uniform(0.05, 0.5), 2))
    if kind == "long" or (kind == "transaction" and rng.random() < 0.4):  # its transaction open a while
        return Item(n, kind, enqueuer, sleep=round(rng.uniform(0.5, 2.5 * LEASE), 2))
    return Item(n, kind, enqueuer, sleep=round(rng.uniform(0.02, 0.4), 3))  # jobs in flight when faults hit


def _fault(rng: random.Random) -> Fault:
    kind = rng.choices(FAULTS, FAULT_WEIGHTS)[0]
    at = round(rng.uniform(0.3, WINDOW), 2)
    slot = rng.randrange(ENQUEUERS if kind == "kill_enqueuer" else WORKERS)
    if kind.startswith("stop_"):
        # mostly past the lease: the frozen worker's claims expire and others take its jobs
        duration = round(rng.uniform(0.2, LEASE) if rng.random() < 0.3 else rng.uniform(LEASE, 3 * LEASE), 2)
    elif kind.startswith("kill_"):
        duration = round(rng.uniform(0.1, 1.0), 2)
    elif kind == "stall_network":  # sometimes past the lease: the workers must fence themselves
        duration = round(rng.uniform(0.3, 2 * LEASE), 2)
    elif kind == "refuse_network":
        duration = round(rng.uniform(0.3, 2.0), 2)
    elif kind == "cpu_storm":  # sometimes past the lease: renewals may come too late
        duration = round(rng.uniform(0.5, 1.5 * LEASE), 2)
    else:
        duration = 0.0
    return Fault(at=at, kind=kind, slot=slot, duration=duration)
