"""The per-minute samples behind `Queue.history`: the `Sampler` every worker runs in its claim
loop.

Each worker samples once per `interval` (a minute), at a second into the minute of its own,
chosen at random when it starts: so the workers of a cluster spread their samples over the
minute, and each one samples every minute exactly once even when its loop wakes late. A sample
is one statement (`Operations.record_sample`, what `Queue.record_sample` runs): the first worker to sample a minute writes it, the
others find it written and read nothing else. Between samples a pass costs a clock read; no
job's claim or completion ever waits on it.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from datetime import timedelta

from ..core import Core
from ..errors import DatabaseError, PermissionDeniedError

logger = logging.getLogger("sqla_queue.sampling")

DEFAULT_SAMPLE_INTERVAL = 60.0


class Sampler:
    """Records `core`'s per-minute sample (`Operations.record_sample`) once every `interval` seconds (wall clock,
    at this sampler's own offset into each interval)."""

    def __init__(self, core: Core, *, retention: timedelta, interval: float = DEFAULT_SAMPLE_INTERVAL,
                 clock: Callable[[], float] = time.time, offset: float | None = None) -> None:
        self.operations = core.operations
        self.retention = retention
        self.interval = interval
        self._clock = clock
        # Not in the interval's first or last seconds: the minute just ended has settled (its
        # last completions committed), and the next one is far.
        self._offset = random.uniform(0.05, 0.75) * interval if offset is None else offset
        self._next_run = self._next_after(clock())

    def run_once(self) -> int:
        """Record this interval's sample now; the rows written."""
        return self.operations.record_sample(self.retention)

    def next_due(self) -> float:
        """`run_if_due`'s wall-clock schedule, on the monotonic clock the `Looper` reads."""
        return time.monotonic() + (self._next_run - self._clock())

    def run_if_due(self) -> int | None:
        """Record a sample if this interval's is due; the rows written (None: not due, or the
        database failed: logged, and tried again next interval). A `PermissionDeniedError`
        propagates instead: the role lacks a grant on the samples, which no later interval
        gets, so the worker stops and says so."""
        now = self._clock()
        if now < self._next_run:
            return None
        self._next_run = self._next_after(now)
        try:
            return self.run_once()
        except PermissionDeniedError:
            raise
        except DatabaseError as exc:
            logger.warning("could not record the queue's per-minute sample (is the schema at sqlaq_0006? "
                           "`sqla-queue db upgrade`): %s", exc)
            return None

    def _next_after(self, now: float) -> float:
        """The first moment after `now` that is this sampler's offset into an interval."""
        due = (now // self.interval) * self.interval + self._offset
        return due if due > now else due + self.interval
