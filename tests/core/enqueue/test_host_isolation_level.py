"""A host engine at a stricter isolation level: our statements still run at READ COMMITTED."""

from __future__ import annotations

import pytest
from sqlalchemy import text

JOBS = 400


@pytest.mark.slow
@pytest.mark.parametrize("level", ["SERIALIZABLE", "REPEATABLE READ"])
def test_claims_race_without_errors_on_a_strict_host_engine(
    make_engine, new_queue, sql_scalar, race, level
):
    host_engine = make_engine(isolation_level=level)
    queue = new_queue(host_engine)
    ids = queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(JOBS)])

    def drain(i: int) -> list[int]:
        mine = []
        while jobs := queue.claim(worker_id=f"w{i}", limit=2):
            for job in jobs:
                assert queue.complete(job.id, job.claim_token) is True
                mine.append(job.id)
        return mine

    claimed = [job_id for worker in race(drain) for job_id in worker]

    assert sorted(claimed) == sorted(ids)
    assert sql_scalar("SELECT count(*) FROM sqla_queue_jobs WHERE status <> 'completed'") == 0
    with host_engine.connect() as conn:
        assert conn.get_isolation_level() == level
        shown = conn.execute(text("SHOW transaction_isolation")).scalar_one()
        assert shown == level.lower()
    assert host_engine.get_execution_options().get("isolation_level") is None
    assert host_engine.hide_parameters is False  # the host's own engine is left as it was
