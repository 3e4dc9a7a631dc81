"""A queue's cluster-wide state, as the database holds it: its pause (`QueueState`) and its flow
control (`QueueLimits`, stored by `Queue.set_limits`, enforced by the claim: docs/how-to/limits.md).

Rates are written the way the command line takes them, ``"100/s"``, ``"5/m"``, ``"1000/h"``
(`parse_rate`), and held as a count per period (`Rate`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypedDict

from .errors import InvalidInputError

RATE_PERIODS = {"s": timedelta(seconds=1), "m": timedelta(minutes=1), "h": timedelta(hours=1)}
"""The periods a rate may name: second, minute, hour."""
DEFAULT_STATS_WINDOW = timedelta(minutes=15)
"""How far back `Queue.stats` looks for finished jobs, durations and counted events."""

MAX_LIMIT = 2**31 - 1
"""Limits are PostgreSQL ``integer`` columns."""

_RATE = re.compile(r"\s*(\d+)\s*/\s*([smh])\s*")


@dataclass(frozen=True)
class Rate:
    """At most `count` job starts per `period`."""

    count: int
    period: timedelta

    def __str__(self) -> str:
        unit = next((name for name, length in RATE_PERIODS.items() if length == self.period), None)
        return f"{self.count}/{unit}" if unit else f"{self.count}/{self.period.total_seconds():g}s"

    @property
    def per_second(self) -> float:
        return self.count / self.period.total_seconds()

    @property
    def burst(self) -> int:
        """The bucket's size: a hundredth of the count (at least 1), so that no window of one
        period sees more than 1 % over `count` (or one start over, for counts below 100)."""
        return max(1, self.count // 100)


def parse_rate(value: Any, what: str = "rate") -> Rate:
    """``"100/s"`` (or a `Rate`) as a `Rate`; an `InvalidInputError` naming `what` otherwise."""
    if isinstance(value, Rate):
        return value
    match = _RATE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise InvalidInputError(
            f"{what} must be a count per period such as '100/s', '5/m' or '1000/h', got {value!r}")
    count = int(match.group(1))
    if not 0 < count <= MAX_LIMIT:
        raise InvalidInputError(f"{what} must start with a count from 1 to {MAX_LIMIT}, got {value!r}")
    return Rate(count, RATE_PERIODS[match.group(2)])


def limit_count(value: Any, what: str) -> int:
    """A concurrency cap: an integer from 1 to `MAX_LIMIT`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_LIMIT:
        raise InvalidInputError(f"{what} must be an integer from 1 to {MAX_LIMIT}, got {value!r}")
    return value


class LimitOptions(TypedDict, total=False):
    """The limits `Queue.set_limits` takes; each one given replaces what the queue had (None
    removes it), the others stay. `concurrency` and `group_concurrency`: integers from 1;
    `rate` and `group_rate`: ``"100/s"``, ``"5/m"``, ``"1000/h"`` (or a `Rate`); `fair`: a bool."""

    concurrency: int | None
    group_concurrency: int | None
    rate: str | Rate | None
    group_rate: str | Rate | None
    fair: bool | None


@dataclass(frozen=True)
class QueueLimits:
    """A queue's flow control, cluster-wide (`Queue.set_limits`); None: no such limit.

    `concurrency`: running jobs of the queue at most, across every worker; `group_concurrency`:
    running jobs per group key at most (1: one at a time per key); `rate` / `group_rate`: job
    starts per period at most, for the queue / per group key (token buckets, docs/how-to/limits.md);
    `fair`: claims take from the group keys in turn.
    """

    queue: str
    concurrency: int | None = None
    group_concurrency: int | None = None
    rate: Rate | None = None
    group_rate: Rate | None = None
    fair: bool = False

    @property
    def unlimited(self) -> bool:
        return self == QueueLimits(self.queue)

    def describe(self) -> str:
        """``concurrency 20, group concurrency 1, rate 100/s, fair``, or ``none``."""
        parts = [f"{label} {value}" for label, value in (
            ("concurrency", self.concurrency), ("group concurrency", self.group_concurrency),
            ("rate", self.rate), ("group rate", self.group_rate)) if value is not None]
        return ", ".join(parts + (["fair"] if self.fair else [])) or "none"

    def as_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "group_concurrency": self.group_concurrency,
                "rate": None if self.rate is None else str(self.rate),
                "group_rate": None if self.group_rate is None else str(self.group_rate), "fair": self.fair}

    @classmethod
    def from_row(cls, row: Any) -> QueueLimits:
        """A row of ``<table>_limits``."""
        return cls(
            queue=row.queue_name, concurrency=row.concurrency, group_concurrency=row.group_concurrency,
            rate=None if row.rate is None else Rate(row.rate, row.rate_period),
            group_rate=None if row.group_rate is None else Rate(row.group_rate, row.group_rate_period),
            fair=row.fair,
        )


@dataclass(frozen=True)
class QueueState:
    """One queue as `Queue.list_queues` (and `pause`, `resume`) report it: whether workers may
    claim from it (`paused`, since `paused_at`, database time), its active jobs now, and its
    `limits` (None: unlimited)."""

    name: str
    paused: bool
    paused_at: datetime | None
    pending: int
    running: int
    limits: QueueLimits | None = None
