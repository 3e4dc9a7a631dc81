"""Leases and long jobs on our own server: a live worker's heartbeat keeps a long job its own;
a frozen worker loses its job to another worker, and its late outcome is rejected."""

from __future__ import annotations

import signal

import pytest

LEASE = 2.0
OPTIONS = ("--concurrency", "2", "--lease", str(LEASE), "--poll-interval", "0.2")
JOB = "SELECT status, attempts, locked_by, claim_token, completed_at FROM sqla_queue_jobs WHERE id = :id"


@pytest.mark.slow
def test_job_running_three_leases_long_is_not_rerun_while_its_worker_lives(fault_app, own_server):
    app = fault_app(own_server.create_database())
    # Two workers, both sweeping for expired leases every second: only the heartbeat keeps the
    # job from being recovered and run a second time.
    workers = [app.start_worker(*OPTIONS) for _ in range(2)]
    job_id = app.enqueue_one(sleep=3 * LEASE)
    app.wait_until(lambda: app.completed() == 1, 6 * LEASE + 20, f"job {job_id} to complete")

    row = app.query(JOB, {"id": job_id})[0]
    runs = app.query("SELECT pid, attempt FROM side_effects WHERE job_id = :id", {"id": job_id})
    assert (row.status, row.attempts) == ("completed", 1)
    assert len(runs) == 1, runs
    assert (row.completed_at - app.scalar(
        "SELECT started_at FROM side_effects WHERE job_id = :id", {"id": job_id}
    )).total_seconds() >= 3 * LEASE
    for worker in workers:
        assert worker.alive()
        assert "lost claim" not in worker.log(), worker.log()
        assert "recovered job" not in worker.log(), worker.log()


@pytest.mark.slow
def test_frozen_worker_loses_its_job_and_its_late_outcome_is_rejected(fault_app, own_server):
    app = fault_app(own_server.create_database())
    frozen = app.start_worker(*OPTIONS)
    job_id = app.enqueue_one(sleep=1.5 * LEASE)
    app.wait_until(lambda: app.query("SELECT 1 FROM side_effects WHERE job_id = :id AND pid = :pid",
                                     {"id": job_id, "pid": frozen.pid}),
                   30, f"the first worker to start job {job_id}")
    frozen.signal(signal.SIGSTOP)
    try:
        rescuer = app.start_worker(*OPTIONS)
        app.wait_until(lambda: app.completed() == 1, 10 * LEASE + 20,
                       f"job {job_id} to be recovered and completed by another worker")
        finished = app.query(JOB, {"id": job_id})[0]
        assert finished.status == "completed"
        assert finished.attempts == 2
        assert f":{rescuer.pid}:" in finished.locked_by
        assert "lost claim" not in frozen.log()
    finally:
        frozen.signal(signal.SIGCONT)

    app.wait_until(lambda: f"lost claim on job {job_id}" in frozen.log(), 10 * LEASE,
                   "the resumed worker to report its lost claim")
    assert app.query(JOB, {"id": job_id})[0] == finished  # its late outcome changed nothing
    runs = app.query("SELECT pid FROM side_effects WHERE job_id = :id ORDER BY id", {"id": job_id})
    assert [r.pid for r in runs] == [frozen.pid, rescuer.pid]
    assert frozen.alive() and rescuer.alive()
    print(f"\nfrozen worker's report: "
          f"{next(line for line in frozen.log().splitlines() if f'lost claim on job {job_id}' in line)}")
