"""Many callers enqueueing the same keys at once: one job per key, one id per key."""

from __future__ import annotations

from collections import defaultdict

import pytest

KEYS = 20
CALLS_PER_THREAD = 200


@pytest.mark.slow
def test_concurrent_enqueues_with_shared_keys_create_one_job_per_key(
    make_engine, new_queue, sql_scalar, race
):
    queue = new_queue(make_engine())

    def enqueue_all(thread: int) -> list[tuple[str, int]]:
        calls = []
        for n in range(CALLS_PER_THREAD):
            key = f"order:{(n + thread * 7) % KEYS}"
            calls.append((key, queue.enqueue("send_email", {"from": thread}, idempotency_key=key)))
        return calls

    results = [call for thread in race(enqueue_all) for call in thread]

    ids_by_key: dict[str, set[int]] = defaultdict(set)
    for key, job_id in results:
        assert isinstance(job_id, int)
        ids_by_key[key].add(job_id)
    assert len(results) == 8 * CALLS_PER_THREAD
    assert len(ids_by_key) == KEYS
    assert all(len(ids) == 1 for ids in ids_by_key.values())  # one id per key for every caller
    assert len({job_id for ids in ids_by_key.values() for job_id in ids}) == KEYS
    assert sql_scalar("SELECT count(*) FROM sqla_queue_jobs") == KEYS


@pytest.mark.slow
def test_concurrent_batches_with_shared_keys_create_one_job_per_key(
    make_engine, new_queue, sql_scalar, race
):
    queue = new_queue(make_engine())

    def enqueue_batches(thread: int) -> list[tuple[str, int]]:
        calls = []
        for n in range(20):
            keys = [f"k{(n + thread + j) % KEYS}" for j in range(5)]
            jobs = [{"task": "send_email", "payload": {}, "idempotency_key": k} for k in keys]
            calls.extend(zip(keys, queue.enqueue_many(jobs)))
        return calls

    results = [call for thread in race(enqueue_batches) for call in thread]

    ids_by_key: dict[str, set[int]] = defaultdict(set)
    for key, job_id in results:
        ids_by_key[key].add(job_id)
    assert all(len(ids) == 1 for ids in ids_by_key.values())
    assert sql_scalar("SELECT count(*) FROM sqla_queue_jobs") == KEYS
