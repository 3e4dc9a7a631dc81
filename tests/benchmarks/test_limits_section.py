"""The limits section's pure pieces (benchmarks/limits.py): its target rows and its report
section, from made-up figures that prove nothing about speed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root holds benchmarks/

from benchmarks import limits, raw_sql, report  # noqa: E402
from benchmarks.__main__ import DEFAULT_SECTIONS, parse_args  # noqa: E402
from benchmarks.server import Database  # noqa: E402
from benchmarks.sizes import SIZES  # noqa: E402
from benchmarks.stats import summary  # noqa: E402

RESULTS = {"limits": {
    "sizes": {"backlog": 100_000, "tenant": 100, "keys": 100, "serial_keys": 1_000, "workers": 20, "jobs": 20_000,
              "rate_seconds": 30},
    "fair_tenant": {"alone": summary([0.020]), "behind": summary([0.035])},
    "fair_drain": {"fair": summary([4_500.0]), "unlimited": summary([5_000.0])},
    "serial_keys": {"serial": summary([3_000.0]), "unlimited": summary([5_000.0]), "overlaps": 0},
    "rate": {"rate": 500, "seconds": [500, 503, 498], "worst_deviation": 0.006},
}}


def test_each_target_is_judged_from_its_figures():
    met = [row["met"] for row in limits.rows(RESULTS)]
    assert met == [True, True, False, True]  # the serial drain made 60 % of the unlimited one
    assert limits.rows({}) == []


def test_the_section_renders_its_targets_and_is_run_by_default():
    lines = report._limits_section(RESULTS)
    assert lines[0] == "## 14. Limits"
    assert "| group_concurrency=1: 0 overlapping runs of a key, >= 80 % of the unlimited drain | 0 overlaps; " \
           "3,000 vs 5,000 jobs/s (60%) | **not met** |" in lines
    assert "limits" in DEFAULT_SECTIONS
    assert parse_args(["--sections", "limits", "--out", "/tmp/x.md"]).sections == ("limits",)


def test_the_section_leaves_the_queue_without_limits_even_when_it_fails(create_database, monkeypatch):
    """The held-horizon and peers sections drain the same queue after this one: a rate left on
    it capped them at 500 jobs/s."""
    url = make_url(create_database()).set(drivername="postgresql").render_as_string(hide_password=False)
    db = Database(url=url, embedded=False, bin_dir=None)

    def limited_then_broken(db, size, *, backlog):
        limits._reset(db, {"rate": "500/s", "fair": True})
        assert _limited_queues(db) == [raw_sql.QUEUE]
        raise RuntimeError("a run that stopped half-way")

    monkeypatch.setattr(limits, "_tenant", limited_then_broken)
    with pytest.raises(RuntimeError, match="half-way"):
        limits.run(db, SIZES["tiny"], lambda message: None)
    assert _limited_queues(db) == []


def _limited_queues(db: Database) -> list[str]:
    with db.connect() as conn:
        return [row[0] for row in conn.execute(f"SELECT queue_name FROM {limits.LIMITS}").fetchall()]
