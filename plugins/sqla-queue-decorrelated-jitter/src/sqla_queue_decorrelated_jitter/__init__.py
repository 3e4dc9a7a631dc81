"""Decorrelated-jitter retry backoff for sqla_queue, registered through the entry point.

The recurrence (from the AWS Architecture Blog's "Exponential Backoff And Jitter") is::

    sleep(0) = base
    sleep(n) = min(cap, uniform(base, 3 * sleep(n - 1)))

It grows about like exponential backoff but each delay depends on the previous one, which
spreads a burst of failures out better than full jitter does, and never retries sooner than
`base`. The catch is that it needs the previous delay, and sqla_queue workers keep no state
between attempts. So the chain is replayed: its random numbers come from a generator seeded
with the job's id, so attempt ``n`` of a job always gets the same delay on any worker, while
jobs that failed together (different ids) get uncorrelated ones.

Past attempt `MAX_STEPS` the chain is not advanced further (the delay of attempt
`MAX_STEPS` repeats): by then it has long been pinned near `cap`, and replaying it costs one
random draw per attempt.
"""

from __future__ import annotations

import random
from datetime import timedelta

import sqla_queue
from sqla_queue.types import ClaimedJob

DEFAULT_BASE = timedelta(seconds=1)
DEFAULT_CAP = timedelta(minutes=30)
MAX_STEPS = 100


class DecorrelatedJitter:
    """The plugin.

    :param base: the shortest delay, and the chain's start. Default 1 s.
    :param cap: the longest delay. Default 30 min.
    :param seed: mixed into every job's generator; two deployments with different seeds
        schedule the same job id differently. Default ``"sqla_queue"``.
    """

    def __init__(self, base: timedelta = DEFAULT_BASE, cap: timedelta = DEFAULT_CAP, seed: str = "sqla_queue") -> None:
        if not isinstance(base, timedelta) or base <= timedelta(0):
            raise ValueError(f"base must be a positive timedelta, got {base!r}")
        if not isinstance(cap, timedelta) or cap < base:
            raise ValueError(f"cap must be a timedelta no shorter than base ({base}), got {cap!r}")
        self.base, self.cap, self.seed = base, cap, seed

    def delay(self, job_id: int, attempt: int) -> timedelta:
        """The delay after failed attempt `attempt` (from 1) of job `job_id`."""
        rng = random.Random(f"{self.seed}:{job_id}")
        base, cap = self.base.total_seconds(), self.cap.total_seconds()
        sleep = base
        for _ in range(min(max(attempt, 1), MAX_STEPS)):
            sleep = min(cap, rng.uniform(base, sleep * 3))
        return timedelta(seconds=sleep)

    @sqla_queue.hookimpl
    def sqla_queue_retry_delay(self, job: ClaimedJob, attempt: int) -> timedelta:
        return self.delay(job.id, attempt)


plugin = DecorrelatedJitter()
"""The instance the entry point registers (base 1 s, cap 30 min)."""

__all__ = ["DEFAULT_BASE", "DEFAULT_CAP", "MAX_STEPS", "DecorrelatedJitter", "plugin"]
