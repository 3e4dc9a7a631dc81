"""Default retry delay: exponential backoff with equal jitter, capped.

The ceiling grows fourfold per failed attempt, ``BASE * FACTOR ** (attempt - 1)``, up to
``CAP``; the delay is drawn uniformly from ``[ceiling / 2, ceiling]``. The jitter spreads a
burst of failures (a partner API outage) instead of retrying them in lockstep; its floor keeps
the schedule long enough to outlast one: the four retries of a task's default five attempts
wait at least 10 minutes 37 seconds in all (at most 21 minutes 15 seconds). Past attempt 5 the
ceiling is the cap (one hour). docs/explanation/retries.md shows the table.
"""

from __future__ import annotations

import random
from datetime import timedelta

from ...hookspecs import hookimpl
from ...types import ClaimedJob

BASE = timedelta(seconds=15)
FACTOR = 4
CAP = timedelta(hours=1)


def ceiling(attempt: int, base: timedelta = BASE, cap: timedelta = CAP, factor: int = FACTOR) -> timedelta:
    """The longest wait after failed attempt `attempt` (nonsense attempts count as the first)."""
    exponent = min(max(attempt, 1) - 1, 62)
    return min(base * (factor**exponent), cap) if exponent < 20 else cap


def delay_range(attempt: int) -> tuple[timedelta, timedelta]:
    """``(shortest, longest)`` wait the default draws from after failed attempt `attempt`."""
    top = ceiling(attempt)
    return top / 2, top


@hookimpl(trylast=True)
def sqla_queue_retry_delay(job: ClaimedJob, attempt: int) -> timedelta:
    low, high = delay_range(attempt)
    return low + (high - low) * random.random()
