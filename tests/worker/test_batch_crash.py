"""SIGKILL workers while they work through a batch (`Queue.batch`): the callback runs exactly
once, after every job of the batch finished, and no job runs before its dependencies completed.

Kills land only while the batch's jobs are running (the callback is still waiting then, so no
kill can interrupt it): their killed jobs come back through lease recovery, and each
completion, first or replayed, settles the callback's count once under its row lock.
"""

from __future__ import annotations

import signal

import pytest

import sqla_queue as sq

JOBS = 400
CHAIN = 5
KILLS = 3
OPTIONS = ("--concurrency", "4", "--lease", "3", "--poll-interval", "0.2")


def _completed(app, ids: list[int]) -> int:
    [[count]] = app.query("SELECT count(*) FROM sqla_queue_jobs WHERE id = ANY(:ids) AND status = 'completed'",
                          {"ids": ids})
    return count


@pytest.mark.slow
def test_sigkilled_workers_run_a_batch_callback_once_after_the_batch(fault_app, session_app_url):
    app = fault_app(session_app_url, "sync")
    jobs = [{"task": app.task, "payload": {"sleep": 0.02}} for _ in range(JOBS)]
    # A chain inside the batch: each link depends on the one before.
    jobs += [{"task": app.task, "payload": {"sleep": 0.02}, **({"depends_on": [sq.Earlier(JOBS + i - 1)]} if i else {})}
             for i in range(CHAIN)]
    batch_id = app.producer.batch(jobs, on_complete=(app.task, {"sleep": 0}))
    ids = list(range(batch_id - len(jobs), batch_id))
    running = [app.start_worker(*OPTIONS), app.start_worker(*OPTIONS)]
    for kill in range(KILLS):
        threshold = (kill + 1) * JOBS // (KILLS + 2)
        app.wait_until(lambda at=threshold: _completed(app, ids) >= at, 120, f"{threshold} batch jobs completed")
        victim = running.pop(0)
        victim.signal(signal.SIGKILL)
        victim.process.wait(timeout=10)
        running.append(app.start_worker(*OPTIONS))
    app.wait_until(lambda: app.query("SELECT status FROM sqla_queue_jobs WHERE id = :id",
                                     {"id": batch_id})[0][0] == "completed", 180, "the callback to complete")
    assert _completed(app, ids) == len(ids), app.logs()
    assert len(app.runs(batch_id)) == 1, app.runs(batch_id)  # exactly one run of the callback
    [[taken_back]] = app.query("SELECT count(*) FROM sqla_queue_jobs WHERE id = ANY(:ids) AND attempts > 1",
                               {"ids": ids})
    assert taken_back > 0  # the kills hit running jobs, which ran again after lease recovery
    # No run of the callback or of a chain link started before a job it depends on completed.
    [[early]] = app.query(
        "SELECT count(*) FROM side_effects s JOIN sqla_queue_jobs_dependencies d ON d.job_id = s.job_id "
        "JOIN sqla_queue_jobs parent ON parent.id = d.depends_on WHERE s.started_at < parent.completed_at")
    assert early == 0
    for worker in running:
        worker.signal(signal.SIGTERM)
    for worker in running:
        assert worker.process.wait(timeout=30) == 0, app.logs()

