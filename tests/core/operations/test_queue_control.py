"""Pause and resume from Python: stored in the database, idempotent, seen by every claim; the
queues' states; and the health signals that show a pause."""

from __future__ import annotations

import pytest
from sqlalchemy import text

import sqla_queue as sq


@pytest.fixture
def queues_rows(engine):
    def read():
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(
                "SELECT queue_name, paused_at FROM sqla_queue_jobs_queues ORDER BY queue_name"))]

    return read


def test_a_paused_queue_is_not_claimed_and_resumed_it_is(ops_queue):
    job_id = ops_queue.enqueue("send_email", {})
    paused = ops_queue.pause("default")
    assert (paused.name, paused.paused, paused.pending, paused.running) == ("default", True, 1, 0)
    assert paused.paused_at is not None

    assert ops_queue.claim(worker_id="w") == []
    late = ops_queue.enqueue("send_email", {})  # enqueue into a paused queue still works
    assert ops_queue.get_job(late).status is sq.JobStatus.PENDING

    resumed = ops_queue.resume("default")
    assert (resumed.paused, resumed.paused_at, resumed.pending) == (False, None, 2)
    assert [job.id for job in ops_queue.claim(worker_id="w", limit=5)] == [job_id, late]


def test_other_queues_keep_flowing_while_one_is_paused(ops_queue):
    ops_queue.enqueue("send_email", {})
    image = ops_queue.enqueue("resize", {})
    ops_queue.pause("default")
    assert ops_queue.claim(worker_id="w") == []
    assert [job.id for job in ops_queue.claim("images", worker_id="w")] == [image]


def test_pause_and_resume_are_idempotent_and_keep_the_first_pause_time(ops_queue, queues_rows):
    first = ops_queue.pause("emails")
    again = ops_queue.pause("emails")
    assert again.paused_at == first.paused_at and queues_rows() == [("emails", first.paused_at)]
    assert ops_queue.resume("emails").paused is False
    assert ops_queue.resume("emails").paused is False
    assert ops_queue.resume("never-paused") == sq.QueueState(name="never-paused", paused=False, paused_at=None,
                                                      pending=0, running=0)
    assert queues_rows() == [("emails", None)]  # resuming an unknown queue writes nothing


def test_list_queues_covers_queues_with_jobs_and_paused_ones(ops_queue):
    ops_queue.enqueue_many([{"task": "send_email", "payload": {}}] * 3)
    ops_queue.enqueue("resize", {})
    ops_queue.claim(worker_id="w")
    done = ops_queue.enqueue("send_email", {}, queue="archive")
    [job] = ops_queue.claim("archive", worker_id="w")
    ops_queue.complete(job.id, job.claim_token)
    ops_queue.pause("reports")  # no jobs at all

    states = {state.name: state for state in ops_queue.list_queues()}

    assert list(states) == ["default", "images", "reports"]  # "archive" has only finished jobs
    assert (states["default"].pending, states["default"].running, states["default"].paused) == (2, 1, False)
    assert (states["images"].pending, states["reports"].paused) == (1, True)
    assert ops_queue.get_job(done).status is sq.JobStatus.COMPLETED


def test_stats_show_a_paused_queue_even_without_jobs(ops_queue):
    ops_queue.enqueue("send_email", {})
    ops_queue.pause("default")
    ops_queue.pause("reports")
    stats = ops_queue.stats()
    assert stats["default"].paused and stats["default"].pending == 1
    assert stats["reports"].paused and "reports" in stats.queues
    ops_queue.resume("reports")
    assert "reports" not in ops_queue.stats().queues and not ops_queue.stats()["reports"].paused


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda q: q.pause(""), "queue must not be empty"),
        (lambda q: q.pause(" emails"), "queue 'emails' has leading or trailing whitespace"),
        (lambda q: q.resume(7), "queue must be a string, got int"),
        (lambda q: q.pause("x" * 300), "queue is 300 characters long"),
    ],
)
def test_a_bad_queue_name_is_a_clear_error_and_writes_nothing(ops_queue, queues_rows, call, message):
    with pytest.raises(sq.InvalidInputError, match=message):
        call(ops_queue)
    assert queues_rows() == []
