"""Several workers sweeping expired leases at once never recover one job twice."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import text

import sqla_queue as sq

JOBS = 600


class Recovered:
    def __init__(self) -> None:
        self.ids: list[int] = []
        self._lock = threading.Lock()

    @sq.hookimpl
    def sqla_queue_job_recovered(self, event):
        with self._lock:
            self.ids.append(event.job_id)


@pytest.mark.slow
def test_concurrent_recovery_never_recovers_a_job_twice(make_engine, new_queue, sql_scalar, race):
    engine = make_engine()
    hooks = Recovered()
    queue = new_queue(engine, plugins=[hooks])
    ids = queue.enqueue_many([{"task": "send_email", "payload": {}} for _ in range(JOBS)])
    assert len(queue.claim(worker_id="crashed", limit=JOBS)) == JOBS
    with engine.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET locked_at = clock_timestamp() - interval '1 hour', "
                          "lease_expires_at = clock_timestamp() - interval '59 minutes'"))

    def sweep(i: int) -> list[int]:
        mine = []
        while batch := queue.recover_expired(lease=timedelta(minutes=1), limit=25):
            mine.extend(batch)
        return mine

    per_sweeper = race(sweep, threads=4)

    recovered = [job_id for sweeper in per_sweeper for job_id in sweeper]
    assert len(recovered) == JOBS
    assert set(recovered) == set(ids)
    assert sorted(hooks.ids) == sorted(ids)
    assert sql_scalar("SELECT count(*) FROM sqla_queue_jobs WHERE status = 'pending' "
                      "AND last_error = 'claim lease expired' AND claim_token IS NULL") == JOBS
