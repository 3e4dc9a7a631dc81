"""What ``--size tiny|small|full`` means for every section.

``full`` is the published figures; ``small`` is a developer's quick look; ``tiny`` keeps the whole
run well under two minutes for CI (its figures mean nothing, it only proves the instrument runs).
Every count scales with the size, so no section is skipped at any size.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Size:
    name: str
    repeat: int
    # raw-SQL limit: jobs claimed+completed per run, by claim batch size
    raw_jobs: dict[int, int]
    raw_enqueue_rows: int  # rows per raw enqueue run (single-row and multi-row)
    raw_clients: tuple[int, ...]
    # sqla_queue enqueue
    enqueue_single: int  # jobs enqueued one per transaction
    enqueue_many_total: int  # jobs per enqueue_many run (in calls of 100 or 1,000)
    # drain
    drain_jobs: int
    drain_processes: tuple[int, ...]
    drain_concurrency: tuple[int, ...]
    # idle wake-up latency
    latency_jobs: int
    # idle cost: worker fleets measured, seconds to settle after start-up, seconds measured
    idle_workers: tuple[int, ...]
    idle_settle: float
    idle_window: float
    # claim cost against backlog
    claim_small_backlog: int
    claim_large_backlog: int
    claim_history: int  # completed rows present in both cases
    claim_samples: int  # claims timed per repetition
    # sustained drain
    sustained_jobs: int
    sustained_window: float  # seconds per window
    sustained_max_seconds: float  # cap per variant (the report says when it cut a run short)
    sustained_repeat: int
    # asyncio: jobs that each await asyncio.sleep(0.1), drained at concurrency 100
    asyncio_sleep_jobs: int
    # peers (--peers): idle wake-ups per system (each costs a rest of about a second); the
    # drains and enqueues use drain_jobs
    peers_latency_jobs: int = 0
    # wake-ups under 32 concurrent enqueuers: seconds each variant enqueues for
    wakeup_seconds: float = 1.0
    # many workers on one database: processes of concurrency 2 beside 2 x 10 (tiny: fewer)
    fleet_processes: int = 20
    # limits (section 13): tenant A's backlog and tenant B's jobs behind it; keys of the fair drain
    # and of the serial drain (group_concurrency=1, over fleet_processes workers); seconds of the
    # rate run (500/s over 4 workers)
    limits_backlog: int = 100_000
    limits_small_tenant: int = 100
    limits_keys: int = 100
    limits_serial_keys: int = 1_000
    limits_rate_seconds: int = 30
    # workflows (section 16): jobs in the fan-in batch, steps of the chain
    workflow_batch: int = 10_000
    workflow_chain: int = 1_000
    # held horizon (section 15): each of its two runs lasts this long
    horizon_seconds: float = 300.0
    horizon_calibration_jobs: int = 20_000
    # history (section 17): finished jobs retention deletes; finished jobs kept beside the claim
    retention_jobs: int = 1_000_000
    history_jobs: int = 10_000_000

    def with_repeat(self, repeat: int | None) -> Size:
        return self if repeat is None else replace(self, repeat=repeat)


SIZES = {
    "tiny": Size(
        name="tiny", repeat=1,
        raw_jobs={1: 200, 10: 600, 100: 2_000}, raw_enqueue_rows=1_000, raw_clients=(1, 2, 4),
        enqueue_single=100, enqueue_many_total=2_000,
        drain_jobs=300, drain_processes=(1, 2), drain_concurrency=(1, 10, 50),
        latency_jobs=5, idle_workers=(1, 3), idle_settle=2.0, idle_window=3.0,
        claim_small_backlog=1_000, claim_large_backlog=10_000, claim_history=5_000, claim_samples=50,
        sustained_jobs=3_000, sustained_window=1.0, sustained_max_seconds=10.0, sustained_repeat=1,
        asyncio_sleep_jobs=1_000, peers_latency_jobs=2, fleet_processes=4,
        limits_backlog=2_000, limits_small_tenant=20, limits_keys=20, limits_serial_keys=50,
        limits_rate_seconds=2, horizon_seconds=8.0, horizon_calibration_jobs=1_000,
        workflow_batch=300, workflow_chain=20, retention_jobs=5_000, history_jobs=20_000,
    ),
    "small": Size(
        name="small", repeat=2,
        raw_jobs={1: 3_000, 10: 10_000, 100: 40_000}, raw_enqueue_rows=10_000, raw_clients=(1, 2, 4),
        enqueue_single=1_000, enqueue_many_total=20_000,
        drain_jobs=5_000, drain_processes=(1, 2), drain_concurrency=(1, 10, 50),
        latency_jobs=40, idle_workers=(1, 20), idle_settle=12.0, idle_window=20.0,
        claim_small_backlog=10_000, claim_large_backlog=100_000, claim_history=100_000,
        claim_samples=500,
        sustained_jobs=100_000, sustained_window=5.0, sustained_max_seconds=40.0, sustained_repeat=1,
        asyncio_sleep_jobs=1_000, peers_latency_jobs=40, wakeup_seconds=3.0,
        limits_backlog=20_000, limits_small_tenant=100, limits_keys=100, limits_serial_keys=200,
        limits_rate_seconds=5, horizon_seconds=60.0, horizon_calibration_jobs=5_000,
        workflow_batch=2_000, workflow_chain=200, retention_jobs=100_000, history_jobs=1_000_000,
    ),
    "full": Size(
        name="full", repeat=3,
        raw_jobs={1: 3_000, 10: 15_000, 100: 60_000}, raw_enqueue_rows=20_000, raw_clients=(1, 2, 4),
        enqueue_single=2_000, enqueue_many_total=50_000,
        drain_jobs=20_000, drain_processes=(1, 2), drain_concurrency=(1, 10, 50),
        latency_jobs=100, idle_workers=(1, 20), idle_settle=12.0, idle_window=30.0,
        claim_small_backlog=10_000, claim_large_backlog=1_000_000, claim_history=1_000_000,
        claim_samples=1_000,
        # A 1,000,000-job backlog, but each variant stops after 120 s (12 windows): on this
        # machine class a full drain of 1M jobs per variant would not fit a ~40 min run.
        sustained_jobs=1_000_000, sustained_window=10.0, sustained_max_seconds=120.0,
        sustained_repeat=1, asyncio_sleep_jobs=1_000, peers_latency_jobs=100,
        wakeup_seconds=5.0,
    ),
}


def raw_jobs_for(size: Size, batch: int) -> int:
    """Jobs per raw run at any batch size: interpolated between the configured ones, so runs at
    the worker's own batch size last about as long as the others."""
    points = sorted(size.raw_jobs.items())
    if batch <= points[0][0]:
        return points[0][1]
    for (b0, j0), (b1, j1) in zip(points, points[1:]):
        if batch <= b1:
            return int(j0 + (j1 - j0) * (batch - b0) / (b1 - b0))
    return points[-1][1]
