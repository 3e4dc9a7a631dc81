"""stats(): the queue-health signals per queue, from a real sequence of operations."""

from __future__ import annotations

from datetime import timedelta


def test_stats_after_a_sequence_of_operations(queue, run_sql):
    due = queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(6)])
    queue.enqueue("send_email", {}, delay=3600)  # scheduled
    jobs = queue.claim(worker_id="w", limit=3)
    completed, failed, running = jobs
    queue.complete(completed.id, completed.claim_token)
    queue.fail(failed.id, failed.claim_token, error="bad address")
    oldest = due[3]
    run_sql("UPDATE sqla_queue_jobs SET run_at = clock_timestamp() - interval '10 minutes' "
            "WHERE id = :id", id=oldest)

    queue.enqueue("resize", {})  # images, max_attempts=2
    [image] = queue.claim("images", worker_id="w")  # attempt 1 of 2: the next one is the last
    queue.enqueue("resize", {}, max_attempts=1)  # pending, its first attempt is its last

    stats = queue.stats()

    default = stats["default"]
    assert (default.pending, default.running, default.completed, default.failed) == (4, 1, 1, 1)
    assert (default.eligible, default.scheduled) == (3, 1)
    assert timedelta(minutes=10) <= default.oldest_eligible_age < timedelta(hours=1)
    assert default.near_max_attempts == 0

    images = stats["images"]
    assert (images.pending, images.running, images.completed, images.failed) == (1, 1, 0, 0)
    assert images.near_max_attempts == 2
    assert sorted(h.queue for h in stats) == ["default", "images"]


def test_stats_of_an_unknown_queue_are_zero(queue):
    queue.enqueue("send_email", {})
    health = queue.stats()["nowhere"]
    assert (health.pending, health.running, health.eligible, health.oldest_eligible_age) == (
        0, 0, 0, None,
    )


def test_oldest_eligible_age_ignores_scheduled_and_running_jobs(queue, run_sql):
    queue.enqueue("send_email", {}, delay=3600)
    queue.enqueue("send_email", {})
    run_sql("UPDATE sqla_queue_jobs SET run_at = clock_timestamp() - interval '1 day'")
    queue.claim(worker_id="w")  # claims one of the two (both a day old)
    queue.enqueue("send_email", {}, delay=3600)  # future: not eligible

    health = queue.stats()["default"]

    assert (health.eligible, health.scheduled, health.running) == (1, 1, 1)
    assert timedelta(hours=23) < health.oldest_eligible_age < timedelta(days=2)
