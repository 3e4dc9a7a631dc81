"""The per-minute history behind the dashboard: `record_sample` writes the last minute of every
queue once (whoever calls it first), from the same reads as `stats`, and prunes what is older
than the retention; `history` reads it back; `workers_seen` names the workers by their claims;
`list_jobs` filters by creation time."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from sqlalchemy import text

import sqla_queue as sq


@pytest.fixture
def minute(engine):
    """The database's current minute, with at least 15 s of it left, so the minute a sample
    describes (the previous one) cannot change while a test sets it up and records it."""
    with engine.connect() as conn:
        seconds = conn.execute(text("SELECT extract(second FROM now())")).scalar_one()
    if seconds > 45:
        time.sleep(61 - float(seconds))
    with engine.connect() as conn:
        return conn.execute(text("SELECT date_trunc('minute', now())")).scalar_one()


def finish_jobs(queue: sq.Queue, run_sql, queue_name: str, durations: list[float], *, fail: int = 0) -> None:
    """Jobs of `queue_name` completed in the previous minute with these claim-to-completion
    durations (seconds), and `fail` more failed in it."""
    task = "resize" if queue_name == "images" else "send_email"
    ids = queue.enqueue_many([{"task": task, "payload": {}}] * (len(durations) + fail))
    jobs = queue.claim(queue_name, worker_id="w1", limit=len(ids))
    for job in jobs[:len(durations)]:
        queue.complete(job.id, job.claim_token)
    for job in jobs[len(durations):]:
        queue.fail(job.id, job.claim_token, error="boom")
    for job_id, seconds in zip(ids, durations):
        run_sql("UPDATE sqla_queue_jobs SET completed_at = date_trunc('minute', now()) - interval '30 seconds',"
                " locked_at = date_trunc('minute', now()) - interval '30 seconds' - make_interval(secs => :s)"
                " WHERE id = :id", id=job_id, s=seconds)
    run_sql("UPDATE sqla_queue_jobs SET failed_at = date_trunc('minute', now()) - interval '10 seconds'"
            " WHERE status = 'failed'")


def test_a_sample_records_the_last_minute_of_every_queue(ops_queue, run_sql, minute):
    finish_jobs(ops_queue, run_sql, "default", [1.0, 2.0, 3.0, 4.0], fail=1)
    finish_jobs(ops_queue, run_sql, "images", [10.0])
    ops_queue.enqueue_many([{"task": "send_email", "payload": {}}] * 2)
    ops_queue.enqueue("send_email", {}, delay=3600)
    run_sql("INSERT INTO sqla_queue_jobs_counters (bucket, queue_name, kind, events) VALUES"
            " (:m - interval '1 minute', 'default', 'retried', 3),"
            " (:m - interval '1 minute', 'default', 'empty_locked', 2),"
            " (:m - interval '1 minute', 'default', 'empty_scheduled', 5),"
            " (:m - interval '2 minutes', 'default', 'retried', 100)", m=minute)

    assert ops_queue.record_sample() == 2
    points = ops_queue.history()

    previous = minute - timedelta(minutes=1)
    assert [(p.at, p.queue) for p in points] == [(previous, "default"), (previous, "images")]
    default, images = points
    assert (default.pending, default.eligible, default.scheduled, default.running) == (3, 2, 1, 0)
    assert (default.completed, default.failed, default.retried, default.empty_claims) == (4, 1, 3, 7)
    assert default.duration_p50 == timedelta(seconds=2.5)
    assert default.duration_p95 == timedelta(seconds=3.85)
    assert default.oldest_eligible_age > timedelta(0)
    assert (images.pending, images.completed, images.duration_p50, images.oldest_eligible_age) == \
        (0, 1, timedelta(seconds=10), None)
    assert ops_queue.history(queue_name="images") == [images]


def test_a_minute_is_written_once_whoever_samples_it(ops_queue, minute):
    ops_queue.enqueue("send_email", {})
    assert ops_queue.record_sample() == 1
    ops_queue.enqueue("send_email", {})
    assert ops_queue.record_sample() == 0
    assert [p.pending for p in ops_queue.history()] == [1]


def test_nothing_is_written_for_an_idle_table(ops_queue, minute):
    assert ops_queue.record_sample() == 0
    assert ops_queue.history() == []


def test_sampling_deletes_samples_older_than_the_retention(ops_queue, run_sql, minute):
    run_sql("INSERT INTO sqla_queue_jobs_samples (bucket, queue_name, pending) VALUES"
            " (:m - interval '3 days', 'default', 1), (:m - interval '1 day', 'default', 2)", m=minute)
    ops_queue.enqueue("send_email", {})

    assert ops_queue.record_sample(retention=timedelta(days=2)) == 1

    assert [p.pending for p in ops_queue.history(since=timedelta(days=7))] == [2, 1]
    assert [p.pending for p in ops_queue.history(since=timedelta(hours=1))] == [1]


@pytest.mark.parametrize(("call", "message"), [
    (lambda q: q.history(since=0), "since must be positive"),
    (lambda q: q.history(since="1h"), "since must be a timedelta"),
    (lambda q: q.history(queue_name=""), "queue"),
    (lambda q: q.record_sample(retention=-1), "retention"),
    (lambda q: q.workers_seen(within=timedelta(0)), "within must be positive"),
    (lambda q: q.list_jobs(created_after=datetime(2026, 1, 1)), "naive datetime"),
    (lambda q: q.list_jobs(created_before="yesterday"), "created_before must be a datetime"),
])
def test_bad_input_is_refused(ops_queue, call, message):
    with pytest.raises(sq.InvalidInputError, match=message):
        call(ops_queue)


def test_workers_seen_by_their_running_and_recently_finished_jobs(ops_queue, run_sql):
    ops_queue.enqueue_many([{"task": "send_email", "payload": {}}] * 4)
    ops_queue.enqueue("resize", {})
    first, second = ops_queue.claim("default", worker_id="w1", limit=2)
    [third] = ops_queue.claim("default", worker_id="w2")
    [image] = ops_queue.claim("images", worker_id="w2")
    ops_queue.complete(first.id, first.claim_token)
    ops_queue.complete(image.id, image.claim_token)
    [old] = ops_queue.claim("default", worker_id="gone")
    ops_queue.complete(old.id, old.claim_token)
    run_sql("UPDATE sqla_queue_jobs SET completed_at = now() - interval '1 hour' WHERE id = :id", id=old.id)
    run_sql("UPDATE sqla_queue_jobs SET locked_at = now() - interval '5 minutes' WHERE id = :id", id=third.id)
    run_sql("UPDATE sqla_queue_jobs SET completed_at = now() - interval '2 minutes' WHERE id = :id", id=image.id)

    seen = {w.worker_id: w for w in ops_queue.workers_seen()}

    assert set(seen) == {"w1", "w2"}
    assert (seen["w1"].queues, seen["w1"].running_job_ids, seen["w1"].finished_recently) == \
        (("default",), (second.id,), 1)
    assert (seen["w2"].queues, seen["w2"].running_job_ids, seen["w2"].finished_recently) == \
        (("default", "images"), (third.id,), 1)
    assert [w.worker_id for w in ops_queue.workers_seen()] == ["w1", "w2"]  # w2 was last seen 2 min ago
    assert seen["w1"].last_seen - seen["w2"].last_seen > timedelta(minutes=1)
    assert "gone" in {w.worker_id for w in ops_queue.workers_seen(within=timedelta(hours=2))}


def test_list_jobs_filters_by_creation_time(ops_queue, run_sql):
    ids = ops_queue.enqueue_many([{"task": "send_email", "payload": {}}] * 4)
    run_sql("UPDATE sqla_queue_jobs SET created_at = now() - make_interval(hours => 4 - id::int)")
    now = ops_queue.get_job(ids[-1]).created_at

    def listed(**bounds) -> list[int]:
        return [job.id for job in ops_queue.list_jobs(**bounds).jobs]

    assert listed(created_after=now - timedelta(hours=1, minutes=30)) == [4, 3]
    assert listed(created_before=now - timedelta(hours=1, minutes=30)) == [2, 1]
    assert listed(created_after=now - timedelta(hours=2, minutes=30), created_before=now) == [3, 2]
    page = ops_queue.list_jobs(created_before=now, limit=2)
    assert ([j.id for j in page.jobs], page.next_before) == ([3, 2], 2)
    assert listed(created_before=now, before_id=page.next_before) == [1]
