"""Default retry delay: exponential backoff with full jitter, capped.

The ceiling doubles per failed attempt, ``BASE * 2 ** (attempt - 1)``, up to ``CAP``; the delay
is drawn uniformly from ``[0, ceiling]``. Full jitter spreads a burst of failures (a partner API
outage) across the window instead of retrying them in lockstep. Past attempt 13 the ceiling is
the cap (one hour).
"""

from __future__ import annotations

import random
from datetime import timedelta

from ...hookspecs import hookimpl
from ...types import ClaimedJob

BASE = timedelta(seconds=1)
CAP = timedelta(hours=1)


def ceiling(attempt: int, base: timedelta = BASE, cap: timedelta = CAP) -> timedelta:
    exponent = min(max(attempt, 1) - 1, 62)
    return min(base * (2**exponent), cap) if exponent < 40 else cap


@hookimpl(trylast=True)
def sqla_queue_retry_delay(job: ClaimedJob, attempt: int) -> timedelta:
    return ceiling(attempt) * random.random()
