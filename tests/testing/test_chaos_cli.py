"""The chaos runner's command line without running a seed: the summary of a failing seed names
its replay command, and bad options are refused before any server starts."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from sqla_queue.testing.chaos.__main__ import describe, main, replay_command, summary
from sqla_queue.testing.chaos.checker import Verdict
from sqla_queue.testing.chaos.runner import SeedResult

EMPTY = {"lost": [], "stuck": [], "duplicated": [], "duplicate_effects": [], "missing_effects": [],
         "unexpected": [], "in_doubt": []}


def test_a_failing_seed_is_summarised_with_its_replay_command(tmp_path):
    failing = SeedResult(17, 40, Verdict({**EMPTY, "duplicated": [5, 9], "in_doubt": [3]}), 12.0, tmp_path / "seed-17")
    passing = SeedResult(18, 40, Verdict({**EMPTY, "in_doubt": [2]}), 10.0, tmp_path / "seed-18")
    report = summary([failing, passing], tmp_path)
    assert report["seeds"] == 2 and report["duplicated"] == 2 and report["in_doubt"] == 2 and report["lost"] == 0
    assert report["failures"] == [{"seed": 17, "replay": "python -m sqla_queue.testing.chaos --seeds 1 --seed 17 --jobs 40 --json",
                                   "logs": str(tmp_path / "seed-17"), "classes": {"duplicated": [5, 9]}}]
    assert report["seconds_per_seed"] == 11.0
    assert describe(failing) == f"seed 17: duplicated 2 (in doubt 1, 12.0 s); replay: {replay_command(17, 40)}"
    assert describe(passing) == "seed 18: ok (in doubt 1, 10.0 s)"


def test_bad_options_are_refused_naming_the_option(tmp_path):
    for argv, option in ((["--seeds", "0"], "--seeds"), (["--jobs", "0"], "--jobs"), (["--seed", "-1"], "--seed")):
        result = CliRunner().invoke(main, [*argv, "--out", str(tmp_path / "logs")])
        assert result.exit_code == 2
        assert f"Invalid value for '{option}'" in result.output
    assert not Path(tmp_path / "logs").exists()
