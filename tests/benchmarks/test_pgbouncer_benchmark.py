"""``python -m benchmarks.pgbouncer`` (the figures in run-workers.md's "Behind PgBouncer") run
for real at a size that proves only that every row is measured: its own PostgreSQL, the
distribution's PgBouncer, the in-process and CLI drains on both routes. No timing is asserted."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root holds benchmarks/

from benchmarks import pgbouncer  # noqa: E402

DOC = ROOT / "docs" / "how-to" / "run-workers.md"


def test_the_pgbouncer_benchmark_measures_every_row(capsys):
    if pgbouncer.pgbouncer_binary() is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"pgbouncer is not installed, and CI must run this: {pgbouncer.INSTALL_HINT}")
        pytest.skip(f"pgbouncer is not installed: {pgbouncer.INSTALL_HINT}")
    assert pgbouncer.main(["--jobs", "200", "--repeat", "1", "--concurrency", "4"]) == 0
    table = capsys.readouterr().out.strip().splitlines()
    assert table[0].startswith("| 200 no-op jobs, 1 worker x 4, median of 1")
    rows = [line.split("|")[1].strip() for line in table[2:]]
    assert rows == ["in-process", "CLI, wall from process start", "CLI, steady from first claim"]
    for line in table[2:]:
        assert line.rstrip(" |").endswith("%")


def test_the_doc_command_is_this_benchmark_with_options_it_takes():
    [command] = re.findall(r"`(python -m benchmarks\.pgbouncer[^`]*)`", DOC.read_text())
    args = pgbouncer.parse_args(command.split()[3:])
    assert (args.jobs, args.concurrency) == (5000, 10)  # the page's "5,000 no-op jobs ... concurrency 10"
