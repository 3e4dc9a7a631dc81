"""The built-in backoff: full jitter under an exponential ceiling, capped at one hour."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sqla_queue import ClaimedJob
from sqla_queue.plugins.builtins import backoff


def _job(attempt: int) -> ClaimedJob:
    return ClaimedJob(id=1, task="t", payload={}, attempts=attempt, max_attempts=attempt + 1,
                      claim_token="tok", queue="default")


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [
        (1, timedelta(seconds=1)),
        (2, timedelta(seconds=2)),
        (3, timedelta(seconds=4)),
        (12, timedelta(seconds=2048)),
        (13, timedelta(hours=1)),
        (14, timedelta(hours=1)),
    ],
)
def test_ceiling_doubles_per_attempt_up_to_the_cap(attempt, expected):
    assert backoff.ceiling(attempt) == expected


@pytest.mark.parametrize("attempt", [40, 63, 64, 1_000, 10**9])
def test_ceiling_is_capped_for_huge_attempt_numbers(attempt):
    assert backoff.ceiling(attempt) == backoff.CAP == timedelta(hours=1)


@pytest.mark.parametrize("attempt", [0, -1, -10**9])
def test_ceiling_treats_nonsense_attempts_as_the_first(attempt):
    assert backoff.ceiling(attempt) == backoff.BASE


def test_ceiling_respects_a_custom_base_and_cap():
    assert backoff.ceiling(3, base=timedelta(seconds=10), cap=timedelta(seconds=25)) == timedelta(seconds=25)
    assert backoff.ceiling(2, base=timedelta(seconds=10), cap=timedelta(seconds=25)) == timedelta(seconds=20)


@pytest.mark.parametrize("attempt", [1, 2, 5, 12, 13, 100, 10**6])
def test_delay_is_within_zero_and_the_ceiling(attempt):
    ceiling = backoff.ceiling(attempt)
    delays = [backoff.sqla_queue_retry_delay(job=_job(attempt), attempt=attempt) for _ in range(500)]
    assert all(isinstance(d, timedelta) for d in delays)
    assert all(timedelta(0) <= d <= ceiling for d in delays)
    assert len(set(delays)) > 1  # jittered, not a fixed schedule
