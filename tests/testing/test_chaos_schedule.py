"""The chaos runner's schedules: one seed, one schedule, whatever the machine or the run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sqla_queue.testing.chaos.schedule import APP_KIND, FAULTS, KINDS, make_schedule


def test_the_same_seed_gives_the_same_schedule():
    assert make_schedule(7, 30).to_json() == make_schedule(7, 30).to_json()
    assert make_schedule(7, 30) != make_schedule(8, 30)


def test_the_schedule_does_not_depend_on_the_process():
    """String seeding, not hash(): another interpreter draws the same schedule."""
    code = "from sqla_queue.testing.chaos.schedule import make_schedule; print(make_schedule(7, 30).to_json())"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "123"})
    assert other.stdout.strip() == make_schedule(7, 30).to_json()


def test_a_schedule_covers_the_workload_and_its_faults_are_in_order():
    schedule = make_schedule(3, 200)
    assert [item.n for item in schedule.items] == list(range(200))
    assert {item.kind for item in schedule.items} == set(KINDS)
    assert [f.at for f in schedule.faults] == sorted(f.at for f in schedule.faults)
    assert all(f.kind in FAULTS for f in schedule.faults)
    kinds_over_seeds = {f.kind for seed in range(50) for f in make_schedule(seed, 10).faults}
    assert kinds_over_seeds == set(FAULTS)


def test_no_jobs_is_refused():
    with pytest.raises(ValueError, match="jobs must be at least 1, got 0"):
        make_schedule(1, 0)


def test_the_clock_kinds_are_due_later_or_snooze_a_few_times():
    items = make_schedule(5, 300).items
    scheduled = [i for i in items if i.kind == "scheduled"]
    snoozing = [i for i in items if i.kind == "snoozing"]
    assert scheduled and all(0.1 <= i.delay <= 3.0 for i in scheduled)
    assert snoozing and all(1 <= i.snoozes <= 3 and 0.05 <= i.snooze <= 0.5 for i in snoozing)
    assert all(i.delay == 0 for i in items if i.kind != "scheduled")


def test_an_app_seed_has_the_same_faults_and_leaves_the_jobs_to_the_app():
    """The faults have their own generator: a seed hurts an --app run as it hurts the built-in one."""
    built_in, app = make_schedule(9, 30), make_schedule(9, 30, app=True)
    assert app.faults == built_in.faults
    assert [(i.n, i.kind, i.enqueuer) for i in app.items] == [(n, APP_KIND, n % 2) for n in range(30)]
