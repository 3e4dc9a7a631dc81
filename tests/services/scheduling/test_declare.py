"""Declaring schedules: `@queue.periodic` on a task or a plain handler, and every bad option
refused with a `ConfigurationError` that names it, before anything is registered."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import create_engine

import sqla_queue as sq
from sqla_queue.core.schedules import Cron, Every, Schedule


@pytest.fixture
def bare_queue():
    """No database is touched by declaring: a queue on an engine that is never connected."""
    engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    yield sq.Queue(engine, load_entrypoints=False)
    engine.dispose()


def test_stacked_on_a_task_keeps_the_task_and_its_options(bare_queue):
    @bare_queue.periodic(cron="*/5 * * * *", timezone="Europe/Berlin", payload={"kind": "daily"},
                         queue="reports", priority=5)
    @bare_queue.task(queue="emails", max_attempts=2)
    def send_digest(payload, ctx):
        return None

    assert isinstance(send_digest, sq.Task) and send_digest.queue == "emails"
    [schedule] = bare_queue.schedules
    assert (schedule.name, schedule.task, schedule.cron, schedule.every) == ("send_digest", "send_digest", "*/5 * * * *", None)
    assert (schedule.timezone, schedule.payload, schedule.queue, schedule.priority, schedule.backfill) == (
        "Europe/Berlin", {"kind": "daily"}, "reports", 5, False)
    assert isinstance(schedule.timing, Cron) and schedule.spec == "*/5 * * * *"


def test_a_plain_handler_is_registered_with_the_task_defaults(bare_queue):
    @bare_queue.periodic(every=timedelta(seconds=30), backfill=True)
    def refresh(payload, ctx):
        return None

    task = bare_queue.get_task("refresh")
    assert refresh is task and task.queue == "default" and task.max_attempts == 5
    [schedule] = bare_queue.schedules
    assert schedule.every == timedelta(seconds=30) and schedule.backfill and schedule.timezone == "UTC"
    assert isinstance(schedule.timing, Every) and schedule.spec == "every 30s"


def test_every_takes_seconds_too_and_two_schedules_of_one_task_need_names(bare_queue):
    @bare_queue.task
    def ping(payload, ctx):
        return None

    bare_queue.periodic(ping, every=1.5)
    with pytest.raises(sq.ConfigurationError, match="a schedule named 'ping' is already declared"):
        bare_queue.periodic(ping, cron="0 * * * *")
    bare_queue.periodic(ping, cron="0 * * * *", name="ping-hourly", payload={"deep": True})
    assert [(s.name, s.task, s.spec) for s in bare_queue.schedules] == [
        ("ping", "ping", "every 1.5s"), ("ping-hourly", "ping", "0 * * * *")]


def test_the_payload_is_a_copy(bare_queue):
    payload = {"ids": [1, 2]}
    copy_me = bare_queue.task(name="copy_me")(lambda p, c: None)
    bare_queue.periodic(copy_me, every=60, payload=payload)
    payload["ids"].append(3)
    assert bare_queue.schedules[0].payload == {"ids": [1, 2]}


BAD = [
    ({}, "exactly one of cron= .* or every="),
    ({"cron": "* * * * *", "every": 10}, "exactly one of cron="),
    ({"cron": "bogus"}, "cron expression 'bogus' is not valid"),
    ({"cron": "61 * * * *"}, "cron expression '61 \\* \\* \\* \\*' is not valid"),
    ({"cron": "0 0 30 2 *"}, "cron expression '0 0 30 2 \\*' is not valid"),  # never matches
    ({"cron": ""}, "cron must be a non-empty string"),
    ({"cron": 5}, "cron must be a non-empty string"),
    ({"every": 0}, "every must be positive"),
    ({"every": -5}, "every must be non-negative|every must be positive"),
    ({"every": timedelta(0)}, "every must be positive"),
    ({"every": "5s"}, "every must be a timedelta or seconds"),
    ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "unknown timezone 'Mars/Olympus'"),
    ({"cron": "* * * * *", "timezone": 3}, "timezone must be an IANA zone name"),
    ({"every": 10, "timezone": "Europe/Berlin"}, "timezone= applies to cron= schedules"),
    ({"every": 10, "payload": {"x": float("nan")}}, "schedule payload: .*NaN"),
    ({"every": 10, "payload": ["not", "a", "dict"]}, "schedule payload: payload must be a dict"),
    ({"every": 10, "queue": " spaced "}, "queue of a schedule"),
    ({"every": 10, "priority": 40000}, "priority of a schedule must be between"),
    ({"every": 10, "backfill": "yes"}, "backfill must be True or False"),
    ({"every": 10, "name": ""}, "schedule name must not be empty"),
]


@pytest.mark.parametrize(("options", "message"), BAD)
def test_bad_options_are_refused_and_register_nothing(bare_queue, options, message):
    def handler(payload, ctx):
        return None

    with pytest.raises(sq.ConfigurationError, match=message):
        bare_queue.periodic(**options)(handler)
    assert bare_queue.schedules == [] and bare_queue.task_names == []


def test_a_payload_over_the_task_limit_is_refused(bare_queue):
    @bare_queue.task(max_payload_bytes=100)
    def small(payload, ctx):
        return None

    with pytest.raises(sq.ConfigurationError, match="payload of task 'small' is .* the limit is 100"):
        bare_queue.periodic(small, every=10, payload={"blob": "x" * 200})
    assert bare_queue.schedules == []


def test_a_task_of_another_queue_is_unknown_here(bare_queue):
    other = sq.Queue(bare_queue.engine, load_entrypoints=False)
    foreign = other.task(name="foreign")(lambda payload, ctx: None)
    with pytest.raises(sq.UnknownTaskError, match="unknown task 'foreign'"):
        bare_queue.periodic(foreign, every=10)


def test_a_schedule_checks_itself_when_built():
    schedule = Schedule(name="tidy", task="tidy", every=90)
    assert schedule.every == timedelta(seconds=90) and schedule.spec == "every 90s"
    with pytest.raises(sq.ConfigurationError, match="timezone= applies to cron= schedules"):
        Schedule(name="tidy", task="tidy", every=90, timezone="Europe/Berlin")
    with pytest.raises(sq.ConfigurationError, match="exactly one of cron="):
        Schedule(name="tidy", task="tidy")
