"""The history section's pure pieces (benchmarks/history.py): its target rows and its report
section; the run itself is exercised at --size tiny by .ci/run."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks import history, report
from benchmarks.__main__ import DEFAULT_SECTIONS, parse_args
from benchmarks.sizes import SIZES
from benchmarks.stats import summary

RETENTION = {"finished": 1_000_000, "pruned": 1_000_000, "seconds": 4.2, "batch_size": 5_000,
             "claim_ms_before": 0.4, "claim_ms_during": summary([0.5, 0.6, 0.7]), "claim_ms_max_during": 3.1,
             "dead_tuples_after": 1_000_000}
HISTORY = {"pending": 10_000, "finished": 10_000_000, "empty_us": summary([1000.0, 1010.0]),
           "kept_us": summary([1050.0, 1060.0]), "ratio": 1055.0 / 1005.0}
PARTITIONED = {"retention": {**RETENTION, "seconds": 0.3, "dead_tuples_after": 12}, "history": HISTORY}
RESULTS = {"history": {"plain": {"retention": RETENTION, "history": HISTORY}, "partitioned": PARTITIONED}}


def _with(retention=None, history=None) -> dict:
    return {"history": {**RESULTS["history"], "partitioned": {"retention": {**PARTITIONED["retention"], **(retention or {})},
                                                             "history": {**HISTORY, **(history or {})}}}}


def test_the_targets_are_judged_on_the_partitioned_layout():
    rows = history.rows(RESULTS)
    assert [row["met"] for row in rows] == [True, True]
    assert rows[0]["target"].endswith("(partitioned layout)")
    assert rows[0]["measured"] == "0.30 s (1,000,000 pruned; 12 dead tuples left in the live table)"
    assert history.rows(_with(retention={"seconds": 4.2}))[0]["met"] is False
    assert history.rows(_with(retention={"pruned": 10}))[0]["met"] is False
    assert history.rows(_with(history={"ratio": 1.2}))[1]["met"] is False
    assert history.rows({}) == [] and history.rows({"history": {"plain": RESULTS["history"]["plain"]}}) == []


def test_the_report_shows_both_layouts_and_the_targets():
    lines = report._history_section(RESULTS)
    assert lines[0] == "## 17. History: retention and the claim beside kept jobs"
    assert ("| plain | 1,000,000 of 1,000,000 | 4.20 | 0.40 | 0.60 (3.1) | 1,000,000 | 1,005 (1,000–1,010) | "
            "1,055 (1,050–1,060) | 1.05x |") in lines
    assert any(line.startswith("| partitioned | 1,000,000 of 1,000,000 | 0.30 |") for line in lines)
    assert any(line.startswith("| Claim with 10,000,000 finished jobs") and line.endswith("| **met** |")
               for line in lines)


def test_the_section_runs_by_default_by_name_and_at_the_issues_sizes():
    assert "history" in DEFAULT_SECTIONS
    assert parse_args(["--sections", "history", "--out", "/tmp/x.md"]).sections == ("history",)
    assert SIZES["full"].retention_jobs == 1_000_000 and SIZES["full"].history_jobs == 10_000_000


def test_the_fed_sustained_drain_is_judged_on_its_own_variant():
    from benchmarks import sustained, targets

    variant = {"last_over_first": summary([0.93]), "fed": 1_000_000, "capped": False}
    row = targets.fed_sustained_row({"sustained": {sustained.FED: variant}})
    assert row["target"].startswith("Sustained drain of 1,000,000 jobs enqueued at the measured drain rate")
    assert row["met"] is True and row["measured"] == "93%"
    slow = targets.fed_sustained_row({"sustained": {sustained.FED: {**variant, "last_over_first": summary([0.8])}}})
    assert slow["met"] is False
