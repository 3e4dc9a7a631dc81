"""The workflows section's pure pieces (benchmarks/workflows.py): its target rows and its report
section, from made-up figures that prove nothing about speed."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root holds benchmarks/

from benchmarks import report, workflows  # noqa: E402
from benchmarks.__main__ import DEFAULT_SECTIONS, parse_args  # noqa: E402
from benchmarks.stats import summary  # noqa: E402

RESULTS = {"workflows": {
    "sizes": {"batch": 10_000, "chain": 1_000},
    "fan_in": {"batch": summary([9_000.0]), "plain": summary([10_000.0]), "callback_runs": [1, 1, 1],
               "callback_lag": 0.012},
    "chain": {"p50": 0.0031, "p99": 0.0094, "steps": 2_997},
}}


def test_each_target_is_judged_from_its_figures():
    assert [row["met"] for row in workflows.rows(RESULTS)] == [True, True, True]
    twice = {"workflows": {**RESULTS["workflows"],
                           "fan_in": {**RESULTS["workflows"]["fan_in"], "callback_runs": [1, 2, 1]}}}
    slow = {"workflows": {**RESULTS["workflows"], "chain": {"p50": 0.0051, "p99": 0.02, "steps": 999}}}
    assert workflows.rows(twice)[0]["met"] is False and workflows.rows(slow)[2]["met"] is False
    assert workflows.rows({}) == []


def test_the_section_renders_its_targets_and_is_run_by_default():
    lines = report._workflows_section(RESULTS)
    assert lines[0] == "## 16. Workflows"
    assert "| fan-in: the batch drains at >= 85 % of the same jobs without a batch, 2 x 10 | " \
           "9,000 vs 10,000 jobs/s (90%) | **met** |" in lines
    assert "workflows" in DEFAULT_SECTIONS
    assert parse_args(["--sections", "workflows", "--out", "/tmp/x.md"]).sections == ("workflows",)
