"""Many workers draining one queue at once: every job is claimed exactly once."""

from __future__ import annotations

import pytest

JOBS = 2_000


def _drain(queue, worker: str, limit: int) -> list[int]:
    """Claim and complete until a claim comes back empty; the ids this worker claimed."""
    mine: list[int] = []
    while jobs := queue.claim(worker_id=worker, limit=limit):
        for job in jobs:
            assert queue.complete(job.id, job.claim_token) is True
            mine.append(job.id)
    return mine


@pytest.mark.slow
@pytest.mark.parametrize("limit", [1, 10], ids=["single", "batch-of-10"])
def test_concurrent_workers_claim_every_job_exactly_once(fresh_queue, sql_scalar, race, limit):
    ids = fresh_queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(JOBS)])
    assert len(set(ids)) == JOBS

    claimed_per_worker = race(lambda i: _drain(fresh_queue, f"worker-{i}", limit))

    claimed = [job_id for worker in claimed_per_worker for job_id in worker]
    assert len(claimed) == JOBS  # none claimed twice
    assert set(claimed) == set(ids)  # none left out
    assert sql_scalar("SELECT count(*) FROM sqla_queue_jobs WHERE status <> 'completed'") == 0
    assert sql_scalar("SELECT count(*) FROM sqla_queue_jobs WHERE attempts <> 1") == 0
    assert len(claimed_per_worker) >= 8
