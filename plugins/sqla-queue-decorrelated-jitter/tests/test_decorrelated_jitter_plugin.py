"""The decorrelated-jitter plugin: its schedule, its contract, and its entry point (which takes
part only when enabled by name)."""

from __future__ import annotations

import importlib.metadata
from datetime import timedelta

import pytest

import sqla_queue as sq
from sqla_queue.testing import check_backoff_plugin
from sqla_queue_decorrelated_jitter import MAX_STEPS, DecorrelatedJitter, plugin


def test_passes_the_backoff_conformance_check(engine):
    report = check_backoff_plugin(plugin, engine, attempts=30)
    assert all(timedelta(seconds=1) <= d <= timedelta(minutes=30) for ds in report.answers.values() for d in ds)
    assert [attempt for attempt, _, _ in report.applied] == [1, 15, 30]
    assert report.loads_on_install is False


def test_delays_follow_the_recurrence_within_its_bounds():
    jitter = DecorrelatedJitter(base=timedelta(seconds=2), cap=timedelta(minutes=5))
    for job_id in range(200):
        previous = timedelta(seconds=2)
        for attempt in range(1, 12):
            delay = jitter.delay(job_id, attempt)
            assert timedelta(seconds=2) <= delay <= min(previous * 3, timedelta(minutes=5))
            previous = delay


def test_a_job_gets_the_same_delay_on_every_worker_and_jobs_are_decorrelated():
    again = DecorrelatedJitter()
    assert [plugin.delay(7, n) for n in range(1, 6)] == [again.delay(7, n) for n in range(1, 6)]
    assert len({plugin.delay(job_id, 3) for job_id in range(100)}) == 100
    assert DecorrelatedJitter(seed="other").delay(7, 3) != plugin.delay(7, 3)


def test_the_chain_grows_towards_the_cap():
    late = [plugin.delay(job_id, 40) for job_id in range(200)]
    early = [plugin.delay(job_id, 1) for job_id in range(200)]
    assert max(early) <= timedelta(seconds=3)
    assert sum(late, timedelta(0)) / len(late) > timedelta(minutes=10)


def test_attempts_past_max_steps_reuse_the_last_step():
    assert plugin.delay(5, MAX_STEPS + 50) == plugin.delay(5, MAX_STEPS)


def test_the_hook_reads_the_job_id_and_attempt():
    job = sq.ClaimedJob(id=11, task="t", payload={}, attempts=2, max_attempts=5, claim_token="x", queue="q")
    assert plugin.sqla_queue_retry_delay(job=job, attempt=2) == plugin.delay(11, 2)


@pytest.mark.parametrize(
    "options",
    [{"base": timedelta(0)}, {"base": 1}, {"cap": timedelta(milliseconds=1)}],
)
def test_bad_settings_are_refused(options):
    with pytest.raises(ValueError):
        DecorrelatedJitter(**options)


def test_registers_only_through_the_sqla_queue_entry_point():
    (entry_point,) = importlib.metadata.entry_points(group="sqla_queue", name="decorrelated_jitter")
    assert entry_point.load() is plugin


def test_installed_it_decides_no_delay_until_enabled_by_name(engine, monkeypatch):
    monkeypatch.delenv("SQLA_QUEUE_PLUGINS", raising=False)
    monkeypatch.delenv("SQLA_QUEUE_BLOCKED_PLUGINS", raising=False)
    assert sq.Queue(engine).plugin_manager.get_plugin("decorrelated_jitter") is None
    enabled = sq.Queue(engine, plugins=["decorrelated_jitter"]).plugin_manager
    assert enabled.get_plugin("decorrelated_jitter") is plugin
    monkeypatch.setenv("SQLA_QUEUE_PLUGINS", "decorrelated_jitter")
    assert sq.Queue(engine).plugin_manager.get_plugin("decorrelated_jitter") is plugin
