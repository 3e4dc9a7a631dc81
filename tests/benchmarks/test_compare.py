"""``python -m benchmarks compare``: the ratio, median and threshold logic on made-up pairs, the
baseline CI compares against, and real comparisons of HEAD with itself at a tiny size (a REF
environment built from a git worktree, both sides' CLI workers and enqueue scripts, a real
PostgreSQL 18): ratios near 1 and exit status 0; a --fail-below no ratio can reach gives exit
status 1 and names the measures.

No timing is asserted beyond "HEAD against itself is about even": the tiny runs share two cores
with the rest of the suite, where single pairs of HEAD against itself were seen from 0.3 to 2.4,
so "about even" is a median of five pairs between 0.4 and 2.5 (and --fail-below 0.4).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root holds benchmarks/

from benchmarks import compare, ref_env  # noqa: E402
from benchmarks.cli_runs import CliRuns  # noqa: E402

TINY = ["--jobs", "100", "--enqueue-jobs", "30", "--setting", "synchronous_commit=off"]


def pair(ref: dict, tree: dict) -> dict:
    return {"ref": ref, "tree": tree}


def run_compare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks", "compare", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


# -- the logic --------------------------------------------------------------------------------------

def test_a_ratio_above_1_means_the_working_tree_did_better():
    assert compare.pair_ratio(compare.MEASURES["drain"], ref=1000.0, tree=1500.0) == 1.5  # a rate
    assert compare.pair_ratio(compare.MEASURES["startup"], ref=0.8, tree=0.4) == 2.0  # a time


def test_the_gate_reads_the_median_of_the_pair_ratios_not_one_pair():
    pairs = [pair({"drain": 1000, "enqueue": 500}, {"drain": 1100, "enqueue": 200}),
             pair({"drain": 1000, "enqueue": 500}, {"drain": 500, "enqueue": 300}),
             pair({"drain": 800, "enqueue": 500}, {"drain": 800, "enqueue": 450})]
    verdict = compare.judge(pairs, ("drain", "enqueue"), 0.7)
    drain, enqueue = verdict["measures"]["drain"], verdict["measures"]["enqueue"]
    assert drain["ratios"] == [1.1, 0.5, 1.0] and drain["median_ratio"] == 1.0  # one bad pair: passes
    assert enqueue["ratios"] == [0.4, 0.6, 0.9] and enqueue["median_ratio"] == 0.6
    assert (drain["ref_median"], drain["tree_median"]) == (1000, 800)
    assert list(verdict["failed"]) == ["enqueue"]
    assert verdict["failed"]["enqueue"].startswith("enqueue: median ratio 0.60x (pairs: 0.40 0.60 0.90)")
    assert "FAILED on enqueue" in compare.render(verdict, "header", 0.7)


def test_a_median_exactly_at_the_threshold_passes():
    pairs = [pair({"startup": 1.0}, {"startup": t}) for t in (1.0, 2.0, 0.5)]
    verdict = compare.judge(pairs, ("startup",), 1.0)
    assert verdict["measures"]["startup"]["ratios"] == [1.0, 0.5, 2.0]
    assert verdict["failed"] == {}
    assert "passed" in compare.render(verdict, "header", 1.0)


def test_the_baseline_is_a_commit_on_this_branchs_history():
    text = compare.BASELINE.read_text()
    commit = compare.read_baseline(text)
    assert len(commit) == 40 and ref_env.resolve(commit) == commit
    ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=ROOT)
    assert ancestor.returncode == 0, f"benchmarks/BASELINE {commit} is not in HEAD's history"


def test_a_baseline_file_is_read_past_its_comments():
    assert compare.read_baseline("# why\n\n  abc123  # the ref\n") == "abc123"
    with pytest.raises(ValueError, match="names no commit"):
        compare.read_baseline("# only a comment\n")


def test_arguments_are_checked_before_anything_is_built():
    assert compare.parse_args([]).ref == compare.read_baseline(compare.BASELINE.read_text())
    assert compare.parse_args(["HEAD", "--measures", "startup,drain"]).measures == ("startup", "drain")
    assert compare.parse_args(["--setting", "synchronous_commit=off"]).setting == [("synchronous_commit", "off")]
    for wrong in (["--pairs", "2"], ["--measures", "drain,speed"], ["--jobs", "0"], ["--setting", "fsync"],
                  ["--setting", "fsync=off", "--database-url", "postgresql://localhost/x"]):
        with pytest.raises(SystemExit) as stopped:
            compare.parse_args(wrong)
        assert stopped.value.code == 2
    with pytest.raises(SystemExit, match="names no commit"):
        ref_env.resolve("no-such-ref-anywhere")


# -- real runs ----------------------------------------------------------------------------------------

def test_head_against_itself_is_about_even_and_passes(tmp_path):
    out = tmp_path / "compare.json"
    done = run_compare("HEAD", "--pairs", "5", *TINY, "--fail-below", "0.4", "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert [p["first"] for p in result["pairs"]] == ["ref", "tree", "ref", "tree", "ref"]  # alternating
    assert result["commit"] == ref_env.resolve("HEAD")
    for name in ("drain", "enqueue"):
        measure = result["measures"][name]
        assert len(measure["ratios"]) == 5
        assert 0.4 <= measure["median_ratio"] <= 2.5, (name, measure)
    assert "gate (--fail-below 0.40x): passed" in done.stdout
    assert "server: embedded PostgreSQL 18, synchronous_commit=off" in done.stdout
    assert f"compare: reusing the checkout of {result['commit'][:12]}" in done.stderr or \
        f"compare: checking out {result['commit'][:12]}" in done.stderr


def test_a_median_below_fail_below_exits_1_and_names_the_measures():
    done = run_compare("HEAD", "--pairs", "3", "--jobs", "20", "--enqueue-jobs", "2",
                       "--measures", "drain,enqueue,startup", "--fail-below", "100")
    assert done.returncode == 1, done.stdout + done.stderr
    for name in ("drain", "enqueue", "startup"):
        assert f"python -m benchmarks compare: {name}: median ratio" in done.stderr
    assert "is below --fail-below 100.00x" in done.stderr
    assert "FAILED on drain, enqueue, startup" in done.stdout


def test_ci_runs_the_gate_command_contributing_shows():
    """.ci/run extracts the line after ``<!-- ci: gate -->`` from CONTRIBUTING.md (the README's
    mechanism) and runs it: the page cannot show one command while CI runs another."""
    extract = ("awk -v tag='<!-- ci: gate -->' '$0 == tag {found=1; next} found && /^[^`]/ {print; exit}' "
               "CONTRIBUTING.md")
    command = subprocess.run(["bash", "-c", extract], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert command.startswith(".venv/bin/python -m benchmarks compare "), command
    assert command in (ROOT / "CONTRIBUTING.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert extract.replace("'<!-- ci: gate -->'", '"<!-- ci: $2 -->"').replace("CONTRIBUTING.md", '"$1"') in ci
    assert 'GATE_CMD=$(doc_command CONTRIBUTING.md gate)' in ci and 'bash -c "$GATE_CMD"' in ci
    args = compare.parse_args(shlex.split(command)[4:])
    assert args.ref == compare.read_baseline(compare.BASELINE.read_text())  # against benchmarks/BASELINE
    assert args.fail_below == 0.7 and args.pairs >= compare.MIN_PAIRS


def test_each_sides_package_gets_its_own_bytecode_whatever_the_working_directory(tmp_path, monkeypatch):
    """A side whose package had no bytecode would compile its sources at every process start (some
    75 ms of each worker's start-up): the REF copy is compiled, not the checkout the comparison
    runs from, whose ``sqla_queue/`` a ``python -c`` started there would import instead."""
    package = tmp_path / "src" / "sqla_queue"
    shutil.copytree(ROOT / "sqla_queue", package, ignore=shutil.ignore_patterns("__pycache__"))
    bin_dir = ref_env.side_environment(tmp_path / "venv", package)
    monkeypatch.chdir(ROOT)

    CliRuns(db=None, work=tmp_path / "work", log=print, bin_dir=bin_dir)  # type: ignore[arg-type]

    assert (package / "__pycache__").is_dir() and (package / "worker" / "__pycache__").is_dir()
