"""The built-in backoff: equal jitter under a fourfold exponential ceiling, capped at one hour,
long enough over the default attempts to outlast a ten-minute outage."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sqla_queue import ClaimedJob
from sqla_queue.plugins.builtins import backoff
from sqla_queue.queue import DEFAULT_MAX_ATTEMPTS


def _job(attempt: int) -> ClaimedJob:
    return ClaimedJob(id=1, task="t", payload={}, attempts=attempt, max_attempts=attempt + 1,
                      claim_token="tok", queue="default")


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [
        (1, timedelta(seconds=15)),
        (2, timedelta(minutes=1)),
        (3, timedelta(minutes=4)),
        (4, timedelta(minutes=16)),
        (5, timedelta(hours=1)),
        (6, timedelta(hours=1)),
    ],
)
def test_ceiling_grows_fourfold_per_attempt_up_to_the_cap(attempt, expected):
    assert backoff.ceiling(attempt) == expected


def test_the_default_attempts_span_more_than_ten_minutes_even_at_the_jitter_floor():
    retries = range(1, DEFAULT_MAX_ATTEMPTS)  # the last attempt fails instead of waiting
    shortest = sum((backoff.delay_range(a)[0] for a in retries), timedelta(0))
    longest = sum((backoff.delay_range(a)[1] for a in retries), timedelta(0))
    assert shortest >= timedelta(minutes=10)
    assert (shortest, longest) == (timedelta(minutes=10, seconds=37.5), timedelta(minutes=21, seconds=15))


@pytest.mark.parametrize("attempt", [40, 63, 64, 1_000, 10**9])
def test_ceiling_is_capped_for_huge_attempt_numbers(attempt):
    assert backoff.ceiling(attempt) == backoff.CAP == timedelta(hours=1)


@pytest.mark.parametrize("attempt", [0, -1, -10**9])
def test_ceiling_treats_nonsense_attempts_as_the_first(attempt):
    assert backoff.ceiling(attempt) == backoff.BASE


def test_ceiling_respects_a_custom_base_cap_and_factor():
    assert backoff.ceiling(3, base=timedelta(seconds=10), cap=timedelta(seconds=25)) == timedelta(seconds=25)
    assert backoff.ceiling(2, base=timedelta(seconds=10), cap=timedelta(minutes=1), factor=2) == timedelta(seconds=20)


@pytest.mark.parametrize("attempt", [1, 2, 5, 12, 13, 100, 10**6])
def test_delay_is_between_half_the_ceiling_and_the_ceiling(attempt):
    ceiling = backoff.ceiling(attempt)
    delays = [backoff.sqla_queue_retry_delay(job=_job(attempt), attempt=attempt) for _ in range(500)]
    assert all(isinstance(d, timedelta) for d in delays)
    assert all(ceiling / 2 <= d <= ceiling for d in delays)
    assert len(set(delays)) > 1  # jittered, not a fixed schedule
