"""Which worker enqueues a tick, and when it passes one over: only a worker serving the
schedule's queue enqueues its ticks, and (``skip_if_pending``, on by default) no new tick while
an earlier tick's job still waits, pending, on that queue."""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import text

from sqla_queue.errors import ConfigurationError
from sqla_queue.services.scheduler import Scheduler

UTC = timezone.utc
T0 = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def ticks(engine) -> list[tuple[str, datetime]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(text(
            "SELECT queue_name, scheduled_at FROM sqla_queue_jobs ORDER BY id")).all()]


def passes(scheduler: Scheduler, clock: Clock, minutes: int) -> int:
    """A scheduler that starts at `T0`, and its passes just after each of the next `minutes`
    ticks of an every-minute schedule."""
    clock.now = T0
    scheduler.seconds_until_due()  # its first look: it starts now
    enqueued = 0
    for minute in range(1, minutes + 1):
        clock.now = T0 + timedelta(minutes=minute, seconds=1)
        enqueued += scheduler.run_if_due()
    return enqueued


def test_a_worker_enqueues_only_the_ticks_of_schedules_on_queues_it_serves(queue, engine):
    queue.periodic(queue.get_task("send_email"), every=60, queue="digests", name="digest")
    clock = Clock(T0)
    elsewhere, serving = Scheduler(queue.core, clock=clock), Scheduler(queue.core, clock=clock)
    elsewhere.serve(["default", "images"])
    serving.serve(["digests"])

    assert elsewhere.schedules() == [] and elsewhere.seconds_until_due() is None
    assert passes(elsewhere, clock, 2) == 0
    assert ticks(engine) == []
    assert passes(serving, clock, 1) == 1
    assert ticks(engine) == [("digests", T0 + timedelta(minutes=1))]


def test_a_schedule_without_a_queue_goes_with_its_tasks_queue(queue):
    queue.periodic(queue.get_task("resize"), every=60)
    scheduler = Scheduler(queue.core)
    scheduler.serve(["default"])
    assert scheduler.schedules() == []
    scheduler.serve(["images"])
    assert [s.name for s in scheduler.schedules()] == ["resize"]


def test_no_new_tick_while_an_earlier_ticks_job_is_pending(queue, engine, caplog):
    queue.periodic(queue.get_task("send_email"), every=60, payload={"digest": True})
    clock = Clock(T0)
    scheduler = Scheduler(queue.core, clock=clock)

    with caplog.at_level(logging.INFO, logger="sqla_queue.scheduling"):
        assert passes(scheduler, clock, 3) == 1  # nobody ran the first: the next two are passed over
    assert ticks(engine) == [("default", T0 + timedelta(minutes=1))]
    assert "skipped the tick of 2026-05-04 12:02:00+00:00, an earlier tick's job is still pending" in caplog.text

    [job] = queue.claim(worker_id="consumer")  # the consumer comes back and runs it
    assert queue.complete(job.id, job.claim_token)
    clock.now = T0 + timedelta(minutes=4, seconds=1)
    assert scheduler.run_if_due() == 1
    assert [tick for _, tick in ticks(engine)] == [T0 + timedelta(minutes=1), T0 + timedelta(minutes=4)]


def test_skip_if_pending_false_enqueues_every_tick(queue, engine):
    queue.periodic(queue.get_task("send_email"), every=60, skip_if_pending=False)
    clock = Clock(T0)
    assert passes(Scheduler(queue.core, clock=clock), clock, 3) == 3
    assert len(ticks(engine)) == 3


def test_the_pending_job_of_another_schedule_of_the_task_does_not_count(queue, engine):
    task = queue.get_task("send_email")
    queue.periodic(task, every=60, payload={"to": "a"}, name="to-a")
    queue.periodic(task, every=60, payload={"to": "b"}, name="to-b")
    clock = Clock(T0)
    assert passes(Scheduler(queue.core, clock=clock), clock, 2) == 2  # one each, then both passed over
    assert len(ticks(engine)) == 2


def test_skip_if_pending_defaults_off_with_backfill_and_must_be_a_bool(queue):
    queue.periodic(queue.get_task("send_email"), every=60, backfill=True, name="filled")
    queue.periodic(queue.get_task("send_email"), every=60, name="plain")
    assert [(s.name, s.skip_if_pending) for s in queue.schedules] == [("filled", False), ("plain", True)]
    with pytest.raises(ConfigurationError, match="skip_if_pending must be True or False, got str"):
        queue.periodic(queue.get_task("send_email"), every=60, name="bad", skip_if_pending="yes")
    assert [s.name for s in queue.schedules] == ["filled", "plain"]


def test_a_worker_that_does_not_serve_the_schedules_queue_enqueues_no_tick(queue, engine):
    """Through real workers: ``every=1s`` on queue ``reports``; a worker of ``default`` runs for
    over two ticks and enqueues none; a worker told no queues serves ``reports`` and does."""
    queue.periodic(queue.get_task("send_email"), every=1, queue="reports")

    def run_for(seconds: float, **options) -> None:
        worker = queue.worker(poll_interval=0.05, **options)
        threading.Timer(seconds, worker.stop).start()
        worker.run()

    run_for(2.5, queues=["default"])
    assert ticks(engine) == []
    run_for(2.5)
    assert ticks(engine) and {name for name, _ in ticks(engine)} == {"reports"}
