"""Graceful shutdown of a worker process: the first SIGTERM finishes or releases, the second
exits at once and leaves its jobs to lease expiry."""

from __future__ import annotations

import signal
import time
from datetime import timedelta

import pytest

from sqla_queue.sql.lease import RELEASED
from sqla_queue.sql.recover import LEASE_EXPIRED

JOB_ROWS = "SELECT id, status, attempts, last_error, locked_by FROM sqla_queue_jobs WHERE id = ANY(:ids) ORDER BY id"


@pytest.mark.slow
def test_first_sigterm_finishes_short_jobs_and_releases_the_rest_unconsumed(fault_app, session_app_url):
    app = fault_app(session_app_url)
    grace = 3.0
    short = app.enqueue(2, sleep=1.0)
    long = app.enqueue(4, sleep=120.0)
    worker = app.start_worker("--concurrency", "6", "--lease", "10", "--poll-interval", "0.2",
                              "--grace", str(grace))
    app.wait_until(lambda: app.started() == 6, 30, "all six jobs to start")

    worker.signal(signal.SIGTERM)
    signalled = time.monotonic()
    returncode = worker.process.wait(timeout=grace + 15)
    exit_after = time.monotonic() - signalled
    print(f"\nfirst SIGTERM: exit code {returncode} after {exit_after:.2f}s (grace {grace}s)")

    assert returncode == 0, app.logs()
    assert "running" not in app.status_counts()
    done = app.query(JOB_ROWS, {"ids": short})
    assert [(r.status, r.attempts) for r in done] == [("completed", 1)] * 2
    released = app.query(JOB_ROWS, {"ids": long})
    assert [(r.status, r.attempts, r.last_error, r.locked_by) for r in released] == [
        ("pending", 0, RELEASED, None)
    ] * 4, released
    assert "released 4 unfinished job(s)" in worker.log()
    # Released, not run to the end: the handlers had barely started their 120 s.
    assert exit_after < grace + 10, f"exit took {exit_after:.1f}s after a {grace}s grace"


@pytest.mark.slow
def test_second_sigterm_exits_at_once_and_its_jobs_return_after_the_lease(fault_app, session_app_url):
    app = fault_app(session_app_url)
    lease = 3.0
    ids = app.enqueue(2, sleep=120.0)
    worker = app.start_worker("--concurrency", "2", "--lease", str(lease), "--poll-interval", "0.2",
                              "--grace", "60")
    app.wait_until(lambda: app.started() == 2, 30, "both jobs to start")

    worker.signal(signal.SIGTERM)
    app.wait_until(lambda: "send it again to exit at once" in worker.log(), 10,
                   "the worker to acknowledge the first SIGTERM")
    worker.signal(signal.SIGTERM)
    signalled = time.monotonic()
    returncode = worker.process.wait(timeout=5)
    print(f"\nsecond SIGTERM: exit code {returncode} after {time.monotonic() - signalled:.2f}s")
    assert returncode == 128 + signal.SIGTERM

    # Nothing was released: the jobs are still held by the dead worker's claim...
    held = app.query(JOB_ROWS, {"ids": ids})
    assert [(r.status, r.attempts) for r in held] == [("running", 1)] * 2

    # ...until the lease runs out and recovery hands them back.
    recovered: list[int] = []

    def recover() -> bool:
        recovered.extend(app.producer.recover_expired(lease=timedelta(seconds=lease)))
        return sorted(recovered) == sorted(ids)

    app.wait_until(recover, lease + 15, "recovery to return both jobs", interval=0.2)
    back = app.query(JOB_ROWS, {"ids": ids})
    assert [(r.status, r.attempts, r.last_error) for r in back] == [("pending", 1, LEASE_EXPIRED)] * 2
