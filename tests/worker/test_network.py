"""Network faults between the workers and our own server, through `proxy.TcpProxy`: every
connection cut, a stall that keeps sockets open (longer than the call deadline and the lease),
and refused connections; then heal. The workers must neither hang nor lose jobs, and jobs
running through the stall must be fenced by their workers and re-run elsewhere.

Handlers record their side effects straight to the server, not through the proxy: the faults
are on the queue's own connections.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy.engine import make_url

from storm import most_held

JOBS = 1_500
WORKERS = 2
CONCURRENCY = 4
LEASE = 2.0  # call deadline = lease / 4 = 0.5 s
OPTIONS = ("--concurrency", str(CONCURRENCY), "--lease", str(LEASE), "--poll-interval", "0.2")
FAULT_SECONDS = 3.0  # > the call deadline and > the lease
# What a worker logs when a call fails: evidence that a fault reached it.
FAILURE_SIGNS = ("database error", "could not record outcome", "lease renewal failed",
                 "batch completion failed", "listener:")


@pytest.mark.slow
def test_workers_ride_out_cut_stall_and_refused_connections(fault_app, own_server, proxy_factory):
    direct = own_server.create_database()
    proxy = proxy_factory(own_server.host, own_server.port)
    through_proxy = make_url(direct).set(host=proxy.host, port=proxy.port).render_as_string(
        hide_password=False
    )
    app = fault_app(direct)
    app.enqueue(JOBS, sleep=0.02)
    workers = [app.start_worker(*OPTIONS, queue_url=app.queue_url(through_proxy)) for _ in range(WORKERS)]
    pids = [w.pid for w in workers]
    progress: list[str] = []

    def fenced(job_id: int) -> bool:
        return any(f"lost claim on job {job_id} during fence: lease could not be renewed" in w.log()
                   for w in workers)

    def after_progress(jobs: int, what: str) -> None:
        target = app.completed() + jobs
        app.wait_until(lambda: app.completed() >= target, 60, f"{jobs} more completions after {what}")
        progress.append(f"{what}: {app.completed()} done")

    def hold_fault(name: str, also: Callable[[], bool] = lambda: True) -> None:
        """Keep the fault on for FAULT_SECONDS and until every worker has felt it."""
        marks = [len(w.log()) for w in workers]
        began = time.monotonic()
        app.wait_until(
            lambda: time.monotonic() - began >= FAULT_SECONDS and all(
                any(sign in w.log()[mark:] for sign in FAILURE_SIGNS) for w, mark in zip(workers, marks)
            ) and also(),
            FAULT_SECONDS + 30, f"every worker to notice the {name}",
        )
        assert all(w.alive() for w in workers), app.logs()
        progress.append(f"{name} held {time.monotonic() - began:.1f}s")

    after_progress(100, "start")

    cut = proxy.cut()
    assert cut > 0
    progress.append(f"cut {cut} connections")
    after_progress(100, "cut")

    # Long jobs (due first) are running when the stall begins: their leases cannot be renewed,
    # so their workers must fence them, and recovery must hand them to someone else.
    long = app.enqueue(WORKERS, sleep=4 * LEASE, run_at=datetime.now(timezone.utc) - timedelta(hours=1))
    app.wait_until(lambda: all(app.runs(job_id) for job_id in long), 30, "the long jobs to start")
    proxy.stall()
    stalled_at = app.completed()
    hold_fault("stall", also=lambda: all(fenced(job_id) for job_id in long))
    proxy.heal()
    progress.append(f"{app.completed() - stalled_at} completions during the stall")
    after_progress(100, "stall healed")

    cut = proxy.refuse()
    hold_fault("refusal")
    progress.append(f"refused {proxy.refused} connection attempts after cutting {cut}")
    proxy.heal()
    after_progress(100, "refusal healed")

    total = JOBS + len(long)
    app.wait_all_completed(total, timeout=120)
    # No hang: jobs enqueued after healing finish promptly.
    healed_at = time.monotonic()
    late = app.enqueue(50)
    total += len(late)
    app.wait_until(lambda: app.completed() == total, 30, "jobs enqueued after healing")
    progress.append(f"50 late jobs done in {time.monotonic() - healed_at:.1f}s")

    assert [w.pid for w in app.workers] == pids and all(w.alive() for w in workers), app.logs()
    assert proxy.refused > 0
    for job_id in long:  # fenced, so never completed by the stalled claim: it ran again
        assert len(app.runs(job_id)) >= 2, app.runs(job_id)
    figures = app.check_invariants(total, max_duplicates=most_held(CONCURRENCY) * WORKERS * 3)
    print(f"\nnetwork faults: {figures}; {'; '.join(progress)}")
