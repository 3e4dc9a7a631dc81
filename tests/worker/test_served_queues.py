"""What a worker serves: by default every queue the app's tasks and schedules declare (said at
start), ``queues=`` narrows it; one claim statement covers them all in a rotating turn; and a
worker claims only jobs whose task it registers, so during a rolling deploy a job of a task only
the new code knows waits, pending, for a worker that runs that code."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

import pytest
from sqlalchemy import text
from waiting import wait_until

import sqla_queue as sq
from sqla_queue.errors import ConfigurationError

FAST = {"poll_interval": 0.05, "lease": timedelta(seconds=6)}


def statuses(engine) -> list[tuple[str, str, str]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(text(
            "SELECT task, queue_name, status FROM sqla_queue_jobs ORDER BY id")).all()]


def test_a_worker_told_no_queues_serves_every_queue_with_a_registered_task_and_says_so(queue, engine, caplog):
    @queue.task(queue="emails")
    def welcome(payload, ctx):
        return None

    queue.enqueue(welcome, {})
    queue.enqueue("send_email", {})
    queue.enqueue("resize", {})
    worker = queue.worker(**FAST)
    with caplog.at_level(logging.INFO, logger="sqla_queue.worker"):
        summary = worker.run(until_empty=True)

    assert summary.completed == 3
    assert {status for _, _, status in statuses(engine)} == {"completed"}
    assert worker.queues == ("default", "emails", "images")
    assert "serving default,emails,images (every queue with a registered task)" in caplog.text


def test_queues_narrows_what_a_worker_serves(queue, engine, caplog):
    @queue.task(queue="emails")
    def welcome(payload, ctx):
        return None

    queue.enqueue(welcome, {})
    queue.enqueue("send_email", {})
    with caplog.at_level(logging.INFO, logger="sqla_queue.worker"):
        queue.worker(queues="emails", **FAST).run(until_empty=True)

    assert statuses(engine) == [("welcome", "emails", "completed"), ("send_email", "default", "pending")]
    assert "serving emails with concurrency" in caplog.text


def test_a_schedules_own_queue_is_served_too(queue):
    queue.periodic(queue.get_task("send_email"), every=60, queue="digests")
    assert queue.core.declared_queues() == ["default", "digests", "images"]


def test_a_worker_with_nothing_to_serve_says_what_to_do(make_queue, clean_jobs):
    bare = make_queue(tasks=False)
    with pytest.raises(ConfigurationError, match=r"no queue to serve: this queue has no registered task; "
                                                 r"register one with @queue.task, or name the queues"):
        bare.worker(**FAST).run(until_empty=True)
    with pytest.raises(ConfigurationError, match="queues must name at least one queue"):
        bare.worker(queues=[])


def test_one_statement_claims_for_every_queue_served(queue):
    """An idle round costs one statement whatever the number of queues: eight queues served,
    each round one complete-and-claim statement naming all of them, in a turn that rotates."""
    for n in range(6):
        queue.task(name=f"task_{n}", queue=f"q{n}")(lambda payload, ctx: None)
    worker = queue.worker(**FAST)
    executor = worker.core.executor
    rounds: list[list[str]] = []
    run_round = executor.run_round
    executor.run_round = lambda conn, params, **kw: rounds.append(params["queues"]) or run_round(conn, params, **kw)

    worker.run(until_empty=True)

    assert len(worker.queues) == 8
    assert 1 <= len(rounds) < len(worker.queues)
    assert all(sorted(queues) == sorted(worker.queues) for queues in rounds)


def test_one_busy_queue_does_not_starve_the_others(queue, engine):
    """A backlog of 300 on ``default`` and 5 jobs on ``images``: each round starts with the
    next queue in turn, so the five run among the first jobs, not after the backlog."""
    order: list[str] = []
    lock = threading.Lock()

    @queue.task(name="bulk")
    def bulk(payload, ctx):
        with lock:
            order.append("default")

    @queue.task(name="small", queue="images")
    def small(payload, ctx):
        with lock:
            order.append("images")

    queue.enqueue_many([{"task": "bulk", "payload": {}} for _ in range(300)])
    queue.enqueue_many([{"task": "small", "payload": {}} for _ in range(5)])
    queue.worker(concurrency=2, batch_size=2, prefetch=0, **FAST).run(until_empty=True)

    assert len(order) == 305
    last_small = max(i for i, name in enumerate(order) if name == "images")
    assert last_small < 40, order[:60]


def test_a_job_of_a_task_the_worker_does_not_register_waits_then_runs_where_it_is_registered(make_queue, clean_jobs,
                                                                                              engine):
    """A rolling deploy: the new code (web process) enqueues ``welcome``; an old worker, which
    does not register it, leaves it pending (no attempt spent, no error) while it runs the rest;
    a new worker runs it."""
    old = make_queue()
    new = make_queue()
    ran: list[int] = []

    @new.task
    def welcome(payload, ctx):
        ran.append(ctx.attempt)

    job_id = new.enqueue(welcome, {})
    other = new.enqueue("send_email", {})
    summary = old.worker(queues=["default"], **FAST).run(until_empty=True)

    waiting = old.get_job(job_id)
    assert (waiting.status, waiting.attempts, waiting.last_error) == (sq.JobStatus.PENDING, 0, None)
    assert old.get_job(other).status is sq.JobStatus.COMPLETED
    assert summary.claimed == 1 and summary.failed == 0

    new.worker(**FAST).run(until_empty=True)
    assert new.get_job(job_id).status is sq.JobStatus.COMPLETED and ran == [1]


def test_a_paused_queue_is_passed_over_in_the_shared_claim(queue, engine):
    queue.enqueue("send_email", {})
    queue.enqueue("resize", {})
    queue.pause("default")
    queue.worker(**FAST).run(until_empty=True)
    assert statuses(engine) == [("send_email", "default", "pending"), ("resize", "images", "completed")]
    queue.resume("default")
    queue.worker(**FAST).run(until_empty=True)
    assert {status for _, _, status in statuses(engine)} == {"completed"}


def test_the_cli_refuses_an_app_with_no_task_when_told_no_queues(make_queue, monkeypatch):
    from click.testing import CliRunner

    from sqla_queue.cli import main

    bare = make_queue(tasks=False)
    monkeypatch.setattr("sqla_queue.cli.root.CliContext.queue", lambda self: bare)
    result = CliRunner().invoke(main, ["--app", "x:y", "worker", "--processes", "1"])
    assert result.exit_code == 2
    assert ("the app registers no task, so the worker has no queue to serve: register one with @queue.task, "
            "or name the queues with --queues") in " ".join(result.output.split())


def test_the_registry_row_names_the_queues_a_worker_told_no_queues_settled_on(queue):
    """The worker registry (doctor's unserved-queue and deploy-skew checks read it) gets the
    queues and tasks the worker found when it started, not the None it was given. The row comes
    once the first rounds are done (a second after the first claim while this job runs)."""
    seen = []

    @queue.task(queue="emails")
    def look(payload, ctx):
        rows = wait_until(lambda: [w for w in queue.workers() if w.worker_id == worker.worker_id],
                          "the worker's registry row", timeout=30, interval=0.05)
        seen.extend((w.queues, w.tasks) for w in rows)

    queue.enqueue(look, {})
    worker = queue.worker(**FAST)
    worker.run(until_empty=True)
    assert seen == [(("default", "emails", "images"), ("look", "resize", "send_email"))]
