"""Workers with different leases on one queue (a rolling deploy that changes ``--lease``):
recovery judges a running job by its holder's lease, so a worker with a short lease never takes
back a job that a worker with a longer one still holds."""

from __future__ import annotations

import threading
from datetime import timedelta

from sqlalchemy import text
from waiting import wait_until

LOCK_AGE = text("SELECT extract(epoch FROM clock_timestamp() - locked_at) FROM sqla_queue_jobs WHERE id = :id")


def test_a_short_lease_worker_leaves_a_long_lease_workers_running_job_alone(make_queue, clean_jobs, engine):
    queue = make_queue(tasks=False)
    runs: list[int] = []
    release = threading.Event()

    @queue.task()
    def hold(payload, ctx):
        runs.append(ctx.attempt)
        release.wait(30)

    job_id = queue.enqueue(hold, {})
    # A renews every 4 s (lease / 3); B sweeps every second with a 2 s lease. Judged by B's
    # lease, A's job looks expired from 2 s after each renewal until the next one.
    long_worker = queue.worker(worker_id="long", lease=timedelta(seconds=12), recovery_interval=3600,
                               concurrency=1, poll_interval=0.05)
    short_worker = queue.worker(worker_id="short", lease=timedelta(seconds=2), concurrency=1, poll_interval=0.05)
    sweeps_after_stale = []
    stale = threading.Event()
    real_recover = short_worker.core.outcomes.recover_expired

    def counted(lease, limit):
        looked_stale = stale.is_set()
        recovered = real_recover(lease, limit)
        if looked_stale:
            sweeps_after_stale.append(recovered)
        return recovered

    short_worker.core.outcomes.recover_expired = counted
    threads = [threading.Thread(target=long_worker.run)]
    threads[0].start()
    try:
        wait_until(lambda: runs == [1], "the long-lease worker to start the job")
        threads.append(threading.Thread(target=short_worker.run))
        threads[1].start()

        def lock_age() -> float:
            with engine.connect() as conn:
                return float(conn.execute(LOCK_AGE, {"id": job_id}).scalar_one())

        wait_until(lambda: lock_age() > 2.2, "the job's last renewal to be older than the short lease")
        stale.set()
        wait_until(lambda: sweeps_after_stale, "a recovery pass of the short-lease worker")

        assert sweeps_after_stale[0] == []
        assert runs == [1]
        job = queue.get_job(job_id)
        assert (job.status.value, job.locked_by) == ("running", "long")
    finally:
        release.set()
        wait_until(lambda: queue.get_job(job_id).status.value != "running", "the job to finish")
        long_worker.stop()
        short_worker.stop()
        for thread in threads:
            thread.join(15)
    job = queue.get_job(job_id)
    assert (job.status.value, job.attempts, runs) == ("completed", 1, [1])
