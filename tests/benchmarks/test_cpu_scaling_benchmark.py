"""``python -m benchmarks.cpu_scaling`` (the 1 vs 2 processes figures in run-workers.md's "Use
every core") run for real at a size that proves only that both drains are measured through the
command line. No timing is asserted."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root holds benchmarks/

from benchmarks import cpu_scaling  # noqa: E402

DOC = ROOT / "docs" / "how-to" / "run-workers.md"


def test_the_cpu_scaling_benchmark_drains_with_one_and_two_processes(capsys, server_url):
    assert cpu_scaling.main(["--jobs", "40", "--repeat", "1", "--job-ms", "2", "--database-url", server_url]) == 0
    out = capsys.readouterr()
    table, load = out.out.strip().split("\n\n")
    table = table.splitlines()
    assert table[0].startswith("| 40 jobs of ") and "| --processes 1 | --processes 2 | 2 / 1 |" in table[0]
    assert [line.split("|")[1].strip() for line in table[2:]] == [
        "seconds, process start to last completion", "jobs/s"]
    assert load.startswith("load average (1 min) ") and load.endswith(" cores")
    assert "rep 1 --processes 1" in out.err and "rep 1 --processes 2" in out.err


def test_the_doc_quotes_this_benchmark_at_its_defaults():
    text = DOC.read_text()
    assert "`python -m benchmarks.cpu_scaling`" in text
    args = cpu_scaling.parse_args([])
    assert (args.jobs, args.job_ms, args.concurrency, args.repeat) == (600, 7.0, 4, 3)
    assert re.search(r"600 jobs of about 7 ms .* \(concurrency 4\)", text.replace("\n", " "))
    assert "median of 3 runs of `python -m benchmarks.cpu_scaling`" in text.replace("\n", " ")
