"""Statistics the report quotes: median with min-max over repetitions, percentiles, windows."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence


def summary(values: Iterable[float]) -> dict:
    """``{"median", "min", "max", "n", "values"}`` of the repetitions of one figure."""
    vals = [float(v) for v in values]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0, "values": []}
    return {
        "median": statistics.median(vals),
        "min": min(vals),
        "max": max(vals),
        "n": len(vals),
        "values": vals,
    }


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear-interpolated percentile (numpy's default), `pct` in 0..100."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def window_rates(samples: Sequence[tuple[float, int]], window: float) -> list[float]:
    """Completions per second in consecutive full windows of `window` seconds.

    `samples` are ``(seconds since start, completed so far)``, ascending; the count at each
    window edge is interpolated between the samples around it. A last, partial window is left
    out: only full windows are compared.
    """
    if len(samples) < 2:
        return []
    end = samples[-1][0]
    edges = [k * window for k in range(int(end // window) + 1)]
    counts = [_count_at(samples, t) for t in edges]
    return [(b - a) / window for a, b in zip(counts, counts[1:])]


def _count_at(samples: Sequence[tuple[float, int]], t: float) -> float:
    if t <= samples[0][0]:
        return float(samples[0][1])
    for (t0, c0), (t1, c1) in zip(samples, samples[1:]):
        if t0 <= t <= t1:
            return c0 if t1 == t0 else c0 + (c1 - c0) * (t - t0) / (t1 - t0)
    return float(samples[-1][1])
