"""``sqla-queue jobs retry`` and ``jobs cancel`` with several ids or a filter: the bulk
actions (`Queue.retry_jobs`, `Queue.cancel_jobs`) as real subprocesses, printing what changed
and what was left alone; a bad mix of arguments is a usage error that changes nothing."""

from __future__ import annotations

import pytest


def fail_all(queue, queue_name: str, count: int) -> None:
    for job in queue.claim(queue_name, worker_id="w", limit=count):
        queue.fail(job.id, job.claim_token, error="boom")


def status_of(queue, job_id: int) -> str:
    return queue.get_job(job_id).status.value


def test_retry_with_a_filter_retries_every_matching_failed_job(cli, ops_queue):
    ids = ops_queue.enqueue_many([{"task": "resize", "payload": {}}] * 3)
    other = ops_queue.enqueue("send_email", {})
    fail_all(ops_queue, "images", 3)
    fail_all(ops_queue, "default", 1)

    done = cli("jobs", "retry", "--queue", "images", "--limit", "2")

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"retried 2 failed job(s), pending again and due now: {ids[0]}, {ids[1]}",
        "skipped 1 matching job(s): held by another transaction right now, beyond --limit, or (retry) "
        "holding an idempotency key an active job holds",
    ]
    assert [status_of(ops_queue, i) for i in [*ids, other]] == ["pending", "pending", "failed", "failed"]
    assert cli("jobs", "retry", "--all").stdout.startswith(f"retried 2 failed job(s), pending again and due now: {ids[2]}, {other}")


def test_retry_of_several_ids_is_a_bulk_retry(cli, ops_queue):
    ids = ops_queue.enqueue_many([{"task": "send_email", "payload": {}}] * 3)
    fail_all(ops_queue, "default", 3)
    done = cli("jobs", "retry", str(ids[0]), str(ids[2]))
    assert done.stdout == f"retried 2 failed job(s), pending again and due now: {ids[0]}, {ids[2]}\n"
    assert status_of(ops_queue, ids[1]) == "failed"


def test_cancel_with_a_filter_cancels_pending_and_asks_running_to_stop(cli, ops_queue):
    ids = ops_queue.enqueue_many([{"task": "send_email", "payload": {}}] * 3)
    [running] = ops_queue.claim("default", worker_id="w")

    done = cli("jobs", "cancel", "--queue", "default")

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"cancelled 2 pending job(s): {ids[1]}, {ids[2]}",
        f"cancel requested for 1 running job(s): {running.id}",
    ]
    assert cli("jobs", "cancel", "--status", "pending").stdout == "cancelled 0 pending job(s)\n"


@pytest.mark.parametrize("args", [
    ("jobs", "retry"),
    ("jobs", "cancel"),
    ("jobs", "cancel", "--status", "failed"),
    ("jobs", "retry", "--limit", "0", "--all"),
])
def test_a_bulk_action_without_a_usable_filter_is_a_usage_error(cli, ops_queue, args):
    job_id = ops_queue.enqueue("send_email", {})
    refused = cli(*args)
    assert refused.returncode == 2, refused.stdout
    assert status_of(ops_queue, job_id) == "pending"
