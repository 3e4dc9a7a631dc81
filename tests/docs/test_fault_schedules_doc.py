"""docs/explanation/fault-schedules.md, run as written: the --app example (its module written
from the page) and the replay of one seed, against the runner's own PostgreSQL, each ending in
the JSON summary the page describes, with every class at zero. The page's first command, the CI
seeds, is run by .ci/run on its own after the suite (it is marked for it)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import doc_blocks
import pytest

from sqla_queue.testing.chaos.__main__ import replay_command

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "explanation" / "fault-schedules.md"
CLASSES = ("lost", "duplicated", "duplicate_effects", "missing_effects", "stuck", "unexpected")


def commands() -> list[str]:
    return doc_blocks.console_commands(DOC)


def test_the_page_shows_exactly_these_commands():
    assert commands() == [
        "python -m sqla_queue.testing.chaos --seeds 20 --jobs 30 --parallel 3 --json",
        "python -m sqla_queue.testing.chaos --seeds 2 --jobs 20 --parallel 2 --app shopapp:chaos --json",
        "python -m sqla_queue.testing.chaos --seeds 1 --seed 2 --jobs 30 --json",
    ]


def test_ci_runs_the_first_command_as_its_chaos_seeds():
    """.ci/run takes the line after the page's ``<!-- ci: chaos -->`` marker: that command."""
    page = DOC.read_text()
    marked = page.split("<!-- ci: chaos -->\n", 1)[1].splitlines()
    assert marked[0] == "```console" and marked[1] == "$ " + commands()[0]
    assert "doc_command docs/explanation/fault-schedules.md chaos" in (ROOT / ".ci" / "run").read_text()


def test_the_replay_command_shown_is_the_one_the_runner_prints():
    assert commands()[2] == replay_command(2, 30)


def run(command: str, tmp_path: Path) -> tuple[list[str], dict]:
    words = shlex.split(command)
    assert words[0] == "python"
    done = subprocess.run([sys.executable, *words[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=400,
                          check=False)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    return lines[:-1], json.loads(lines[-1])


@pytest.mark.parametrize("number, seeds", [(1, [1, 2]), (2, [2])])
def test_the_commands_run_as_written_and_find_nothing(number, seeds, tmp_path):
    [app_module] = doc_blocks.blocks(DOC, "python")
    (tmp_path / "shopapp.py").write_text(app_module)
    per_seed, summary = run(commands()[number], tmp_path)
    assert [line.split(":")[0] for line in per_seed] == [f"seed {seed}" for seed in seeds]
    assert summary["seeds"] == len(seeds)
    assert {name: summary[name] for name in CLASSES} == dict.fromkeys(CLASSES, 0), summary
    assert summary["failures"] == []
    logs = Path(summary["logs"])
    for seed in seeds:
        trace = (logs / f"seed-{seed}" / "events.jsonl").read_text()
        assert '"event": "fault"' in trace and '"event": "claimed"' in trace and '"event": "verdict"' in trace


def test_the_summary_shown_has_the_keys_the_runner_prints():
    [output] = doc_blocks.blocks(DOC, "text")
    shown = json.loads(output.strip().splitlines()[-1])
    assert list(shown) == ["seeds", *CLASSES, "in_doubt", "failures", "seconds_per_seed", "logs"]
