"""Crash: SIGKILL worker processes again and again while they work through 3,000 jobs.

At-least-once delivery means a killed worker's jobs come back through lease recovery and run
again; what must never happen is a job lost, left running or failed, or completed twice. Re-runs
are bounded by what the kills explain: each kill can re-run at most the jobs it held
(``concurrency``).

Both kinds of handler: the same storm with ``work`` (``time.sleep``, on handler threads) and with
its twin ``work_async`` (``await asyncio.sleep``, asyncio tasks on the worker's event loop), same
jobs, kills and invariants. A storm takes about 20 s, so the async one runs at full size rather
than shrunk: the fewer jobs, the fewer kills land mid-run.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from storm import sigkill_storm, stop_gracefully

JOBS = 3_000
WORKERS = 3
CONCURRENCY = 4
KILLS = 12
FIGURES = Path("/tmp/sqla_queue_crash_figures.txt")
WORKER_OPTIONS = ("--concurrency", str(CONCURRENCY), "--lease", "3", "--poll-interval", "0.2")


@pytest.mark.slow
def test_sigkill_storm_loses_nothing_and_completes_every_job_once(fault_app, session_app_url, handler_kind):
    app = fault_app(session_app_url, handler_kind)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    app.enqueue(JOBS, sleep=0.05)  # >= 12.5 s of work for 12 slots: the kills land mid-run
    running = [app.start_worker(*WORKER_OPTIONS) for _ in range(WORKERS)]
    app.wait_until(lambda: app.started() > 0, 30, "the first job to start")

    completed_at_kill = sigkill_storm(app, running, rng, kills=KILLS, options=WORKER_OPTIONS)
    kills = len(completed_at_kill)

    # The kills must have landed while there was work to lose.
    assert completed_at_kill[-1] < JOBS, f"the work ended before the last kill: {completed_at_kill}"
    app.wait_all_completed(JOBS, timeout=120)
    figures = app.check_invariants(JOBS, max_duplicates=CONCURRENCY * kills)
    figures.update(kills=kills, seed=seed, workers=WORKERS, concurrency=CONCURRENCY, handlers=handler_kind)

    stop_gracefully(app, running)
    report = ", ".join(f"{key}={value}" for key, value in figures.items())
    print(f"\ncrash test figures: {report}")
    print(f"completed jobs at each kill: {completed_at_kill}")
    figures_path = FIGURES if handler_kind == "sync" else FIGURES.with_stem(f"{FIGURES.stem}_{handler_kind}")
    figures_path.write_text(f"{report}\ncompleted at each kill: {completed_at_kill}\n")
