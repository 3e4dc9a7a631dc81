"""Crash: SIGKILL worker processes again and again while they work through 3,000 jobs.

At-least-once delivery means a killed worker's jobs come back through lease recovery and run
again; what must never happen is a job lost, left running or failed, or completed twice. Re-runs
are bounded by what the kills explain: each kill can re-run at most the jobs it held
(``concurrency`` and its prefetch buffer: `storm.most_held`).

Both kinds of handler: the same storm with ``work`` (``time.sleep``, on handler threads) and with
its twin ``work_async`` (``await asyncio.sleep``, asyncio tasks on the worker's event loop), same
jobs, kills and invariants. A storm takes about 20 s, so the async one runs at full size rather
than shrunk: the fewer jobs, the fewer kills land mid-run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from storm import report, stop_gracefully, storm

JOBS = 3_000
WORKERS = 3
CONCURRENCY = 4
KILLS = 12
FIGURES = Path("/tmp/sqla_queue_crash_figures.txt")
WORKER_OPTIONS = ("--concurrency", str(CONCURRENCY), "--lease", "3", "--poll-interval", "0.2")


@pytest.mark.slow
def test_sigkill_storm_loses_nothing_and_completes_every_job_once(fault_app, session_app_url, handler_kind):
    app = fault_app(session_app_url, handler_kind)
    app.enqueue(JOBS, sleep=0.05)  # >= 12.5 s of work for 12 slots: the kills land mid-run
    figures, completed_at_kill, running = storm(app, jobs=JOBS, workers=WORKERS, concurrency=CONCURRENCY,
                                                kills=KILLS, options=WORKER_OPTIONS)
    figures.update(handlers=handler_kind)
    stop_gracefully(app, running)
    report("crash test figures", figures, completed_at_kill,
           FIGURES if handler_kind == "sync" else FIGURES.with_stem(f"{FIGURES.stem}_{handler_kind}"))
