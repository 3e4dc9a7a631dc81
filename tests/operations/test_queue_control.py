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


@pytest.fixture
def cq(ops_queue, engine):
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM sqla_queue_jobs_queues"))
    yield ops_queue
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM sqla_queue_jobs_queues"))


def test_a_paused_queue_is_not_claimed_and_resumed_it_is(cq):
    job_id = cq.enqueue("send_email", {})
    paused = cq.pause("default")
    assert (paused.name, paused.paused, paused.pending, paused.running) == ("default", True, 1, 0)
    assert paused.paused_at is not None

    assert cq.claim(worker_id="w") == []
    late = cq.enqueue("send_email", {})  # enqueue into a paused queue still works
    assert cq.get_job(late).status is sq.JobStatus.PENDING

    resumed = cq.resume("default")
    assert (resumed.paused, resumed.paused_at, resumed.pending) == (False, None, 2)
    assert [job.id for job in cq.claim(worker_id="w", limit=5)] == [job_id, late]


def test_other_queues_keep_flowing_while_one_is_paused(cq):
    cq.enqueue("send_email", {})
    image = cq.enqueue("resize", {})
    cq.pause("default")
    assert cq.claim(worker_id="w") == []
    assert [job.id for job in cq.claim("images", worker_id="w")] == [image]


def test_pause_and_resume_are_idempotent_and_keep_the_first_pause_time(cq, queues_rows):
    first = cq.pause("emails")
    again = cq.pause("emails")
    assert again.paused_at == first.paused_at and queues_rows() == [("emails", first.paused_at)]
    assert cq.resume("emails").paused is False
    assert cq.resume("emails").paused is False
    assert cq.resume("never-paused") == sq.QueueState(name="never-paused", paused=False, paused_at=None,
                                                      pending=0, running=0)
    assert queues_rows() == [("emails", None)]  # resuming an unknown queue writes nothing


def test_list_queues_covers_queues_with_jobs_and_paused_ones(cq):
    cq.enqueue_many([{"task": "send_email", "payload": {}}] * 3)
    cq.enqueue("resize", {})
    cq.claim(worker_id="w")
    done = cq.enqueue("send_email", {}, queue="archive")
    [job] = cq.claim("archive", worker_id="w")
    cq.complete(job.id, job.claim_token)
    cq.pause("reports")  # no jobs at all

    states = {state.name: state for state in cq.list_queues()}

    assert list(states) == ["default", "images", "reports"]  # "archive" has only finished jobs
    assert (states["default"].pending, states["default"].running, states["default"].paused) == (2, 1, False)
    assert (states["images"].pending, states["reports"].paused) == (1, True)
    assert cq.get_job(done).status is sq.JobStatus.COMPLETED


def test_stats_show_a_paused_queue_even_without_jobs(cq):
    cq.enqueue("send_email", {})
    cq.pause("default")
    cq.pause("reports")
    stats = cq.stats()
    assert stats["default"].paused and stats["default"].pending == 1
    assert stats["reports"].paused and "reports" in stats.queues
    cq.resume("reports")
    assert "reports" not in cq.stats().queues and not cq.stats()["reports"].paused


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda q: q.pause(""), "queue must not be empty"),
        (lambda q: q.pause(" emails"), "queue 'emails' has leading or trailing whitespace"),
        (lambda q: q.resume(7), "queue must be a string, got int"),
        (lambda q: q.pause("x" * 300), "queue is 300 characters long"),
    ],
)
def test_a_bad_queue_name_is_a_clear_error_and_writes_nothing(cq, queues_rows, call, message):
    with pytest.raises(sq.InvalidInputError, match=message):
        call(cq)
    assert queues_rows() == []
