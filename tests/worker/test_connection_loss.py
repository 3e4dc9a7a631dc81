"""Connection loss on our own server: the workers' backends are terminated several times and
the server is restarted mid-run. The same worker processes recover by themselves.

Both kinds of handler (``handler_kind``): ``work`` on handler threads and its ``async def`` twin
``work_async`` on the worker's event loop, whose side effect goes through an AsyncEngine that the
restart breaks too. Same jobs, faults and invariants: one run takes seconds, nothing to shrink."""

from __future__ import annotations

import time

import pytest
from sqlalchemy.engine import make_url

from storm import most_held

JOBS = 1_500
WORKERS = 2
CONCURRENCY = 4
TERMINATIONS = 3
OPTIONS = ("--concurrency", str(CONCURRENCY), "--lease", "3", "--poll-interval", "0.2")


@pytest.mark.slow
def test_workers_survive_terminated_backends_and_a_server_restart(fault_app, own_server, handler_kind):
    url = own_server.create_database()
    database = make_url(url).database
    app = fault_app(url, handler_kind)
    app.enqueue(JOBS, sleep=0.02)
    workers = [app.start_worker(*OPTIONS) for _ in range(WORKERS)]
    pids = [w.pid for w in workers]

    progress: list[str] = []

    def after_progress(jobs: int, what: str) -> None:
        """Wait until `jobs` more jobs completed: the workers are working again."""
        target = app.completed() + jobs
        app.wait_until(lambda: app.completed() >= target, 60, f"{jobs} more completions after {what}")
        progress.append(f"{what}: {app.completed()}")

    after_progress(100, "start")
    for n in range(TERMINATIONS):
        terminated = own_server.terminate_backends(database, app.worker_app_name)
        assert terminated > 0, "no worker backend to terminate"
        progress.append(f"terminated {terminated} backends")
        after_progress(100, f"termination {n + 1}")

    restarted = time.monotonic()
    own_server.restart()
    progress.append(f"restart took {time.monotonic() - restarted:.1f}s")
    after_progress(100, "restart")

    app.wait_all_completed(JOBS, timeout=120)
    late = app.enqueue(50)
    app.wait_until(lambda: app.completed() == JOBS + len(late), 30, "jobs enqueued after the faults")

    assert [w.pid for w in app.workers] == pids and all(w.alive() for w in workers), app.logs()
    faults = TERMINATIONS + 1
    figures = app.check_invariants(JOBS + len(late), max_duplicates=most_held(CONCURRENCY) * WORKERS * faults)
    print(f"\nconnection loss ({handler_kind} handlers): {figures}; {'; '.join(progress)}")
