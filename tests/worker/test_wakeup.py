"""Wake-up latency: an idle worker polling every 5 s starts new jobs in well under a second,
because LISTEN/NOTIFY wakes it on every enqueue."""

from __future__ import annotations

import statistics

import pytest

JOBS = 100
POLL_INTERVAL = 5.0

LATENCY = """
SELECT extract(epoch FROM min(s.started_at) - j.created_at)
FROM sqla_queue_jobs j JOIN side_effects s ON s.job_id = j.id
WHERE j.id = :id GROUP BY j.created_at
"""


@pytest.mark.slow
def test_idle_worker_wakes_on_enqueue_well_before_its_poll_interval(fault_app, session_app_url):
    app = fault_app(session_app_url)
    app.start_worker("--concurrency", "2", "--lease", "10", "--poll-interval", str(POLL_INTERVAL))
    warm_up = app.enqueue_one()
    app.wait_until(lambda: app.completed() == 1, 30, f"warm-up job {warm_up} to complete")

    latencies: list[float] = []
    for n in range(JOBS):
        job_id = app.enqueue_one()
        rows = app.wait_until(lambda: app.query(LATENCY, {"id": job_id}), 3 * POLL_INTERVAL,
                              f"job {job_id} to start", interval=0.02)
        latencies.append(float(rows[0][0]))
        app.wait_until(lambda: app.completed() == n + 2, 3 * POLL_INTERVAL,
                       f"job {job_id} to complete", interval=0.02)

    median = statistics.median(latencies)
    p99 = statistics.quantiles(latencies, n=100)[98]
    print(f"\nenqueue-to-start over {JOBS} jobs (poll interval {POLL_INTERVAL:g}s): "
          f"median {median * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms")
    assert median < 1.0, sorted(latencies)
