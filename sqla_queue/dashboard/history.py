"""The overview's plots from `Queue.history`: the recorded minutes of every queue (or one),
folded into one value per time bucket for each signal.

Across queues counts add up and durations take the slowest queue's (percentiles of different
queues cannot be merged). Over a day, minutes are grouped five at a time so a page stays small:
a gauge (backlog) shows the bucket's highest minute, a count its per-minute mean. A minute no
worker sampled is a gap in the line, not a zero.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..reports import HistoryPoint
from .formatting import seconds_text
from .plots import Chart, Series

RANGES = {"1h": timedelta(hours=1), "24h": timedelta(hours=24)}
"""The look-backs the overview offers, by their name in the URL."""
BUCKET = {"1h": timedelta(minutes=1), "24h": timedelta(minutes=5)}

COLORS = {"pending": "#2563eb", "eligible": "#0891b2", "running": "#d97706", "completed": "#16a34a",
          "failed": "#dc2626", "retried": "#d97706", "p50": "#2563eb", "p95": "#7c3aed",
          "empty claims": "#6b7280"}
"""Each signal's colour, the state colours of the job badges where one applies."""

_COUNTS = ("completed", "failed", "retried", "empty_claims")
_GAUGES = ("pending", "eligible", "scheduled", "running")
_DURATIONS = ("duration_p50", "duration_p95")
_SUMMED = (*_COUNTS, *_GAUGES)


@dataclass(frozen=True)
class Minute:
    """Every sampled queue's values for one minute, combined."""

    at: datetime
    values: dict[str, float | None]


def combine(points: Iterable[HistoryPoint], queue: str | None = None) -> dict[datetime, Minute]:
    """The points of `queue` (or of all queues), one `Minute` per sampled minute; one pass,
    since a day of many queues is thousands of points."""
    minutes: dict[datetime, Minute] = {}
    for point in points:
        if queue is not None and point.queue != queue:
            continue
        at = point.at.replace(second=0, microsecond=0)
        minute = minutes.get(at)
        if minute is None:
            minute = minutes[at] = Minute(at, {**dict.fromkeys(_SUMMED, 0.0), **dict.fromkeys(_DURATIONS)})
        _add(minute.values, point)
    return minutes


def _add(values: dict[str, float | None], point: HistoryPoint) -> None:
    for name in _SUMMED:
        values[name] += getattr(point, name)
    for name in _DURATIONS:
        duration = getattr(point, name)
        if duration is not None:
            seconds, slowest = duration.total_seconds(), values[name]
            values[name] = seconds if slowest is None else max(slowest, seconds)


def bucketed(minutes: dict[datetime, Minute], name: str, start: datetime, end: datetime,
             bucket: timedelta, fold: Callable[[list[float]], float]) -> list[tuple[datetime, float | None]]:
    """One point per `bucket` from `start` to `end`: `fold` of the sampled minutes' values of
    `name`, or None (a gap) when no minute in the bucket has one."""
    points, at, step = [], start, timedelta(minutes=1)
    while at < end:
        found = []
        minute = at
        while minute < at + bucket:
            value = minutes[minute].values[name] if minute in minutes else None
            if value is not None:
                found.append(value)
            minute += step
        points.append((at, fold(found) if found else None))
        at += bucket
    return points


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def charts(points: Iterable[HistoryPoint], *, range_name: str, now: datetime,
           queue: str | None = None) -> list[Chart]:
    """The overview's five plots over the range ending at `now` (database time)."""
    span, bucket = RANGES[range_name], BUCKET[range_name]
    end = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    start = end - span
    minutes = combine(points, queue)

    def series(label: str, name: str, fold: Callable[[list[float]], float]) -> Series:
        return Series(label, bucketed(minutes, name, start, end, bucket, fold), COLORS.get(label, ""))

    per_minute = "per minute" if bucket == timedelta(minutes=1) else "per minute, 5-minute means"
    return [
        Chart("Backlog (jobs)", start, end, (series("pending", "pending", max), series("eligible", "eligible", max),
                                             series("running", "running", max))),
        Chart(f"Throughput: completed {per_minute}", start, end, (series("completed", "completed", _mean),)),
        Chart(f"Failures {per_minute}", start, end, (series("failed", "failed", _mean),
                                                     series("retried", "retried", _mean))),
        Chart("Durations, claim to completion" + ("" if queue else " (slowest queue)"), start, end,
              (series("p50", "duration_p50", max), series("p95", "duration_p95", max)),
              format_value=seconds_text),
        Chart(f"Empty claims {per_minute}", start, end, (series("empty claims", "empty_claims", _mean),)),
    ]
