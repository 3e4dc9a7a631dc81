"""Enqueueing ticks against real PostgreSQL: what a tick's job looks like, once per tick, the
latest tick only unless backfill, and a scheduler that stays off the database between ticks."""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import event, text

from sqla_queue.core.schedules import MAX_BACKFILL
from sqla_queue.services.scheduler import Scheduler, fire_tick, last_ticks

UTC = timezone.utc
T0 = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)  # a whole minute: a tick of every interval below


def jobs(engine) -> list[dict]:
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT task, queue_name, payload, priority, run_at, scheduled_at FROM sqla_queue_jobs ORDER BY id"
        )).mappings().all()
    return [dict(row) for row in rows]


def stored_tick(engine, name: str):
    with engine.connect() as conn:
        return conn.execute(text("SELECT last_tick FROM sqla_queue_jobs_schedules WHERE name = :n"),
                            {"n": name}).scalar_one_or_none()


@pytest.fixture
def every_minute(queue):
    # skip_if_pending=False: these tests enqueue tick after tick and run none of them.
    queue.periodic(queue.get_task("send_email"), every=60, payload={"digest": True}, queue="digests", priority=3,
                   skip_if_pending=False)
    return queue.schedules[0]


@pytest.fixture
def statements(engine):
    """Statements sent on the test's engine (the queues here run on it), as they are sent."""
    sent: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        sent.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    yield sent
    event.remove(engine, "before_cursor_execute", record)


def test_a_tick_is_one_job_due_at_the_tick_with_scheduled_at_the_tick(queue, engine, every_minute):
    assert fire_tick(queue.core, every_minute, T0 + timedelta(seconds=5), not_before=T0 - timedelta(seconds=1)) == 1
    assert jobs(engine) == [{"task": "send_email", "queue_name": "digests", "payload": {"digest": True},
                             "priority": 3, "run_at": T0, "scheduled_at": T0}]
    assert stored_tick(engine, "send_email") == T0
    # The same tick again, from any worker: nothing.
    assert fire_tick(queue.core, every_minute, T0 + timedelta(seconds=30), not_before=T0 - timedelta(seconds=1)) == 0
    assert len(jobs(engine)) == 1


def test_the_task_defaults_apply_when_the_schedule_names_none(queue, engine):
    resize = queue.get_task("resize")
    queue.periodic(resize, every=60)
    assert fire_tick(queue.core, queue.schedules[0], T0, not_before=T0 - timedelta(minutes=1)) == 1
    [job] = jobs(engine)
    assert (job["queue_name"], job["priority"], job["payload"]) == ("images", 0, {})


def test_an_older_tick_never_moves_the_schedule_back(queue, engine, every_minute):
    fire_tick(queue.core, every_minute, T0 + timedelta(minutes=5), not_before=T0)
    assert fire_tick(queue.core, every_minute, T0 + timedelta(minutes=3), not_before=T0) == 0  # a clock behind
    assert stored_tick(engine, "send_email") == T0 + timedelta(minutes=5)
    assert [job["scheduled_at"] for job in jobs(engine)] == [T0 + timedelta(minutes=5)]


def test_without_backfill_only_the_latest_missed_tick_is_enqueued(queue, engine, every_minute):
    fire_tick(queue.core, every_minute, T0, not_before=T0 - timedelta(minutes=1))
    # Ten minutes without a pass (a pause, a slow worker): one job, for the latest tick.
    assert fire_tick(queue.core, every_minute, T0 + timedelta(minutes=10, seconds=20), not_before=T0) == 1
    assert [job["scheduled_at"] for job in jobs(engine)] == [T0, T0 + timedelta(minutes=10)]


def test_with_backfill_every_missed_tick_is_enqueued_once(queue, engine):
    queue.periodic(queue.get_task("send_email"), every=60, backfill=True)
    schedule = queue.schedules[0]
    # First sight: only the latest tick after the scheduler started, even with backfill.
    assert fire_tick(queue.core, schedule, T0 + timedelta(minutes=3), not_before=T0 - timedelta(hours=1)) == 1
    assert fire_tick(queue.core, schedule, T0 + timedelta(minutes=10, seconds=20), not_before=T0) == 7
    assert fire_tick(queue.core, schedule, T0 + timedelta(minutes=10, seconds=50), not_before=T0) == 0
    assert [job["scheduled_at"] for job in jobs(engine)] == [T0 + timedelta(minutes=m) for m in range(3, 11)]
    assert [job["run_at"] for job in jobs(engine)] == [T0 + timedelta(minutes=m) for m in range(3, 11)]


def test_backfill_is_bounded_to_the_latest_ticks(queue, engine):
    queue.periodic(queue.get_task("send_email"), every=1, backfill=True)
    schedule = queue.schedules[0]
    fire_tick(queue.core, schedule, T0, not_before=T0 - timedelta(seconds=1))
    gap = MAX_BACKFILL + 500
    assert fire_tick(queue.core, schedule, T0 + timedelta(seconds=gap), not_before=T0) == MAX_BACKFILL
    ticks = [job["scheduled_at"] for job in jobs(engine)][1:]
    assert ticks == [T0 + timedelta(seconds=s) for s in range(gap - MAX_BACKFILL + 1, gap + 1)]


def test_cron_ticks_in_a_zone(queue, engine):
    queue.periodic(queue.get_task("send_email"), cron="0 9 * * *", timezone="Europe/Berlin", name="nine")
    schedule = queue.schedules[0]
    assert fire_tick(queue.core, schedule, datetime(2026, 7, 15, 7, 0, 1, tzinfo=UTC),
                     not_before=datetime(2026, 7, 15, tzinfo=UTC)) == 1
    assert jobs(engine)[0]["scheduled_at"] == datetime(2026, 7, 15, 7, tzinfo=UTC)
    assert last_ticks(queue.core) == {"nine": datetime(2026, 7, 15, 7, tzinfo=UTC)}


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def test_the_scheduler_stays_off_the_database_until_a_tick_is_due(queue, engine, every_minute, statements):
    clock = Clock(T0 + timedelta(seconds=10))
    scheduler = Scheduler(queue.core, clock=clock)
    assert scheduler.seconds_until_due() == 50.0
    for seconds in (10, 30, 59.999):
        clock.now = T0 + timedelta(seconds=seconds)
        assert scheduler.run_if_due() == 0
    assert statements == []
    clock.now = T0 + timedelta(minutes=1, seconds=2)
    assert scheduler.run_if_due() == 1
    assert statements, "the due tick went to the database"
    sent = len(statements)
    assert scheduler.seconds_until_due() == 58.0
    clock.now = T0 + timedelta(minutes=1, seconds=40)
    assert scheduler.run_if_due() == 0 and len(statements) == sent
    assert [job["scheduled_at"] for job in jobs(engine)] == [T0 + timedelta(minutes=1)]


def test_a_scheduler_never_enqueues_ticks_from_before_it_started(queue, engine, every_minute):
    fire_tick(queue.core, every_minute, T0, not_before=T0 - timedelta(minutes=1))
    clock = Clock(T0 + timedelta(minutes=30, seconds=30))  # restarted after a 30-minute outage
    scheduler = Scheduler(queue.core, clock=clock)
    assert scheduler.run_if_due() == 0
    clock.now += timedelta(seconds=31)
    assert scheduler.run_if_due() == 1
    assert [job["scheduled_at"] for job in jobs(engine)] == [T0, T0 + timedelta(minutes=31)]


def test_no_schedules_no_deadline(queue):
    scheduler = Scheduler(queue.core)
    assert scheduler.seconds_until_due() is None and scheduler.run_if_due() == 0


def test_a_refused_job_is_logged_and_its_tick_skipped(queue, engine, every_minute, caplog):
    queue.max_payload_bytes = 5  # lowered after the schedule was declared
    clock = Clock(T0 - timedelta(seconds=1))
    scheduler = Scheduler(queue.core, clock=clock)
    assert scheduler.seconds_until_due() == 1.0  # the scheduler starts at its first look
    clock.now = T0 + timedelta(seconds=1)
    with caplog.at_level(logging.ERROR, logger="sqla_queue.scheduling"):
        assert scheduler.run_if_due() == 0
    assert "schedule 'send_email': could not enqueue its tick" in caplog.text and "limit is 5" in caplog.text
    assert jobs(engine) == [] and stored_tick(engine, "send_email") is None  # rolled back together
    assert scheduler.seconds_until_due() == 59.0  # on to the next tick


def test_the_handler_sees_its_tick(queue, engine):
    seen: list[datetime] = []
    done = threading.Event()

    @queue.task(name="tick")
    def tick(payload, ctx):
        seen.append(ctx.scheduled_at)
        done.set()

    queue.periodic(tick, every=3600)
    now = datetime.now(UTC)
    assert fire_tick(queue.core, queue.schedules[0], now, not_before=now - timedelta(hours=1)) == 1
    summary = queue.worker(queues=["default"], concurrency=1, poll_interval=0.05, listen=False).run(until_empty=True)
    assert summary.completed == 1 and done.is_set()
    assert seen == [queue.schedules[0].due_ticks(now - timedelta(hours=1), now)[0]]


def test_an_idle_worker_wakes_up_for_each_tick(queue, engine):
    """A poll interval far longer than the schedule, and no LISTEN: only the scheduler's
    deadline can wake the worker for its ticks (and the jobs it enqueued)."""
    ran: list[datetime] = []
    three = threading.Event()

    @queue.task(name="beat")
    def beat(payload, ctx):
        ran.append(ctx.scheduled_at)
        if len(ran) >= 3:
            three.set()

    queue.periodic(beat, every=1)
    worker = queue.worker(queues=["default"], concurrency=1, poll_interval=120, listen=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert three.wait(60), f"ticks run: {ran}"
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert len(ran) == len(set(ran)) and ran == sorted(ran)
