"""Tick computation, no database: interval ticks aligned to the Unix epoch, cron ticks read on a
time zone's wall clock through its daylight-saving changes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from sqla_queue.core.schedules import MAX_BACKFILL, Cron, Every

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def cron(expression: str, zone: str = "UTC") -> Cron:
    return Cron.parse(expression, ZoneInfo(zone))


# -- every= ---------------------------------------------------------------------------------


def test_interval_ticks_are_multiples_of_the_interval_since_the_epoch():
    every = Every(timedelta(seconds=30))
    ticks = every.ticks(utc(2026, 1, 1, 11, 58, 45), utc(2026, 1, 1, 12, 0, 30), limit=100)
    assert ticks == [utc(2026, 1, 1, 11, 59), utc(2026, 1, 1, 11, 59, 30), utc(2026, 1, 1, 12, 0),
                     utc(2026, 1, 1, 12, 0, 30)]
    for tick in ticks:
        assert (tick - datetime(1970, 1, 1, tzinfo=UTC)) % timedelta(seconds=30) == timedelta(0)


def test_interval_ticks_do_not_depend_on_when_a_worker_looks():
    every = Every(timedelta(seconds=7))
    early = every.ticks(utc(2026, 1, 1, 12, 0, 0), utc(2026, 1, 1, 12, 1), limit=100)
    late = every.ticks(utc(2026, 1, 1, 12, 0, 3, 123456), utc(2026, 1, 1, 12, 1), limit=100)
    assert late == [t for t in early if t > utc(2026, 1, 1, 12, 0, 3, 123456)]
    assert every.next_after(utc(2026, 1, 1, 12, 0, 3)) == early[0]


def test_interval_bounds_exclude_after_and_include_until():
    every = Every(timedelta(minutes=1))
    assert every.ticks(utc(2026, 1, 1, 12), utc(2026, 1, 1, 12, 2), limit=10) == [
        utc(2026, 1, 1, 12, 1), utc(2026, 1, 1, 12, 2)]
    assert every.next_after(utc(2026, 1, 1, 12)) == utc(2026, 1, 1, 12, 1)
    assert every.ticks(utc(2026, 1, 1, 12), utc(2026, 1, 1, 12, 0, 59), limit=10) == []


def test_interval_limit_keeps_the_latest_ticks_without_walking_the_gap():
    every = Every(timedelta(seconds=1))
    ticks = every.ticks(utc(2000, 1, 1), utc(2026, 1, 1), limit=MAX_BACKFILL)  # 26 years of seconds
    assert len(ticks) == MAX_BACKFILL
    assert ticks[-1] == utc(2026, 1, 1)
    assert every.ticks(utc(2000, 1, 1), utc(2026, 1, 1), limit=1) == [utc(2026, 1, 1)]


# -- cron= ----------------------------------------------------------------------------------


def test_cron_ticks_in_utc():
    ticks = cron("*/5 * * * *").ticks(utc(2026, 1, 1, 12, 1), utc(2026, 1, 1, 12, 20), limit=100)
    assert ticks == [utc(2026, 1, 1, 12, m) for m in (5, 10, 15, 20)]


def test_a_sixth_field_counts_seconds():
    ticks = cron("* * * * * */2").ticks(utc(2026, 1, 1, 12), utc(2026, 1, 1, 12, 0, 7), limit=100)
    assert ticks == [utc(2026, 1, 1, 12, 0, s) for s in (2, 4, 6)]


def test_cron_is_read_on_the_zone_wall_clock_in_winter_and_summer():
    nine = cron("0 9 * * *", "Europe/Berlin")
    assert nine.next_after(utc(2026, 1, 15)) == utc(2026, 1, 15, 8)  # CET, UTC+1
    assert nine.next_after(utc(2026, 7, 15)) == utc(2026, 7, 15, 7)  # CEST, UTC+2
    assert cron("0 9 * * *", "America/New_York").next_after(utc(2026, 7, 15)) == utc(2026, 7, 15, 13)


def test_spring_forward_a_skipped_wall_time_runs_once_right_after_the_gap():
    # 2026-03-29 in Berlin: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that night.
    ticks = cron("30 2 * * *", "Europe/Berlin").ticks(utc(2026, 3, 27), utc(2026, 3, 31), limit=10)
    assert ticks == [utc(2026, 3, 27, 1, 30), utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30)]


def test_fall_back_a_repeated_wall_time_runs_once_when_the_hour_is_named():
    # 2026-10-25 in Berlin: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
    daily = cron("30 2 * * *", "Europe/Berlin")
    ticks = daily.ticks(utc(2026, 10, 23), utc(2026, 10, 27), limit=10)
    assert ticks == [utc(2026, 10, 23, 0, 30), utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30),
                     utc(2026, 10, 26, 1, 30)]
    assert daily.next_after(utc(2026, 10, 25, 0, 30)) == utc(2026, 10, 26, 1, 30)


def test_fall_back_an_hourly_wildcard_keeps_ticking_through_the_repeated_hour():
    half_hourly = cron("*/30 * * * *", "Europe/Berlin")
    ticks = half_hourly.ticks(utc(2026, 10, 24, 23, 45), utc(2026, 10, 25, 2, 15), limit=10)
    assert ticks == [utc(2026, 10, 25, 0), utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1),
                     utc(2026, 10, 25, 1, 30), utc(2026, 10, 25, 2)]
    assert all(b - a == timedelta(minutes=30) for a, b in zip(ticks, ticks[1:]))
    # ...and next_after walks the same instants.
    walked, at = [], utc(2026, 10, 24, 23, 45)
    while (at := half_hourly.next_after(at)) <= utc(2026, 10, 25, 2, 15):
        walked.append(at)
    assert walked == ticks


def test_cron_limit_keeps_the_latest_ticks():
    ticks = cron("* * * * *").ticks(utc(2020, 1, 1), utc(2026, 1, 1, 12), limit=3)
    assert ticks == [utc(2026, 1, 1, 11, 58), utc(2026, 1, 1, 11, 59), utc(2026, 1, 1, 12)]


@pytest.mark.parametrize("expression", ["* * * * *", "0 9 * * 1-5", "*/7 3 * * *", "@hourly"])
def test_next_after_is_the_first_of_ticks(expression):
    schedule = cron(expression, "Europe/Berlin")
    start = utc(2026, 10, 24, 20, 17)
    first = schedule.next_after(start)
    assert schedule.ticks(start, first, limit=5) == [first]
    assert schedule.ticks(start, first - timedelta(microseconds=1), limit=5) == []


def test_a_worker_without_cron_schedules_never_imports_croniter():
    """Start-up time: croniter (with dateutil) is imported by the first cron schedule only."""
    import subprocess
    import sys

    probe = "import sys, sqla_queue.worker.worker, sqla_queue.cli; print('croniter' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
