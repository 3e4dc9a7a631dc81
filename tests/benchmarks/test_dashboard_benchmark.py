"""``python -m benchmarks.dashboard`` (the figures in dashboard.md's "How fast it answers") run
for real at a size that proves every row is measured and the verdict printed, on a database of
its own on the test server. No timing is asserted."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root holds benchmarks/

from benchmarks import dashboard  # noqa: E402

DOC = ROOT / "docs" / "how-to" / "dashboard.md"
ROWS = ("GET / (overview, last hour)", "GET /?range=24h", "Queue.stats()", "Queue.history(since=1h)",
        "GET /jobs?status=failed", "GET /jobs?status=failed (page after 1,000)", "GET /jobs/<id>", "GET /workers")


def test_the_dashboard_benchmark_times_every_page(server_url, capsys):
    assert dashboard.main(["--jobs", "3000", "--pending", "300", "--repeat", "2", "--database-url", server_url]) == 0
    out = capsys.readouterr().out
    assert "filled 3,000 jobs (300 pending)" in out
    for row in ROWS:
        assert row in out, row
    assert re.search(r"target: overview under 100 ms: (met|MISSED) \(\d+\.\d ms\)", out)


def test_the_doc_commands_are_this_benchmark_with_options_it_takes():
    text = DOC.read_text()
    commands = re.findall(r"`(python -m benchmarks\.dashboard[^`]*)`", text)
    assert commands == ["python -m benchmarks.dashboard"]
    args = dashboard.parse_args([])
    assert (args.jobs, args.pending) == (1_000_000, 10_000)  # the page's "1,000,000 jobs ... 10,000 pending"
    [option] = re.findall(r"`(--pending \d+)`", text)
    assert dashboard.parse_args(option.split()).pending == 100_000
