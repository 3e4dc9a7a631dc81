"""The held-horizon section's pure pieces (benchmarks/horizon.py): when the claim's latency
doubled, its target rows and its report section; the run itself is exercised at --size tiny by
.ci/run."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks import horizon, report  # noqa: E402
from benchmarks.__main__ import DEFAULT_SECTIONS, parse_args  # noqa: E402

RUN = {"completed_per_s": [100] * 10, "claim_ms": [1.0] * 10, "dead_tuples": [10] * 10}
RESULTS = {"horizon": {
    "drain_rate": 2000.0, "feed_per_s": 1000.0, "seconds": 10, "horizon_warning_s": 1.0,
    "free": {**RUN, "completed": 1000, "warned_at_s": None},
    "held": {**RUN, "completed": 850, "warned_at_s": 3.0, "dead_tuples": list(range(0, 10_000, 1_000))},
    "throughput_ratio": 0.85, "latency_doubled_s": 6.0,
}}


def test_the_latency_doubles_when_its_rolling_median_reaches_twice_the_start():
    steady = [1.0] * 20
    assert horizon.doubled_at(steady, 1.0) is None
    assert horizon.doubled_at(steady[:10] + [9.0] + steady[11:], 1.0) is None  # one slow probe
    rising = [1.0] * 10 + [2.5] * 10
    assert horizon.doubled_at(rising, 1.0) == 12.0  # the third slow sample tips the median of 5
    assert horizon.doubled_at([1.0, 2.0], 1.0) is None


def test_the_targets_read_the_ratio_and_the_order_of_warning_and_doubling():
    met = [row["met"] for row in horizon.rows(RESULTS)]
    assert met == [True, True]
    late = {"horizon": {**RESULTS["horizon"], "throughput_ratio": 0.5, "latency_doubled_s": 2.0}}
    assert [row["met"] for row in horizon.rows(late)] == [False, False]
    never = {"horizon": {**RESULTS["horizon"], "held": {**RESULTS["horizon"]["held"], "warned_at_s": None}}}
    assert horizon.rows(never)[1]["met"] is False and "warned at never" in horizon.rows(never)[1]["measured"]
    assert horizon.rows({}) == []


def test_the_report_shows_both_runs_and_the_targets():
    lines = report._horizon_section(RESULTS)
    assert lines[0] == "## 15. Held horizon"
    assert "| with the holder | 85 | 1.00 → 1.00 ms | 9,000 |" in lines
    assert any(line.startswith("| held horizon: throughput >= 80 %") and line.endswith("| **met** |") for line in lines)


def test_the_section_runs_by_default_and_by_name():
    assert "horizon" in DEFAULT_SECTIONS
    assert parse_args(["--sections", "horizon", "--out", "/tmp/x.md"]).sections == ("horizon",)
