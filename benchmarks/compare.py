"""``python -m benchmarks compare [REF]``: the working tree against a git ref, side by side.

Each side is sqla_queue from a venv of its own, both built the same way (benchmarks/ref_env.py:
REF's from a cached git worktree, the working tree's from this checkout), on a database of its
own, migrated by that side's own ``sqla-queue db upgrade``, on one PostgreSQL server. A *pair*
measures both sides, measure by measure back to back, the side that goes first alternating from
pair to pair, so a machine that slows down or speeds up during the run moves both sides of a
pair alike and neither side always runs first. Each measure's ratio is taken within a pair (working tree over REF for
rates, REF over working tree for times: above 1 means the working tree is faster), and the gate
looks at the median ratio over the pairs: one disturbed pair does not decide it.

The harness (this directory) is the working tree's for both sides; only the library differs.
Without REF, the commit in benchmarks/BASELINE is used (CI's gate, .ci/run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import ref_env, tables
from .cli_runs import CliRuns
from .idle import APP_MODULE, APP_SOURCE
from .peers import BULK_BATCH, completion_figures, parse_enqueue_output
from .server import benchmark_server, empty_database

BASELINE = Path(__file__).resolve().parent / "BASELINE"
SIDES = ("ref", "tree")
MIN_PAIRS = 3


@dataclass(frozen=True)
class Measure:
    name: str
    unit: str
    higher_is_better: bool
    what: str


MEASURES = {m.name: m for m in (
    Measure("drain", "jobs/s", True, "jobs / (CLI worker process start -> last completion)"),
    Measure("enqueue", "jobs/s", True, "one job per enqueue() call, fresh process, from Queue() to the last commit"),
    Measure("bulk", "jobs/s", True, "the drain's jobs by enqueue_many() in calls of 1,000, fresh process"),
    Measure("startup", "s", False, "CLI worker process start -> its first completion"),
)}
DEFAULT_MEASURES = ("drain", "enqueue")


# -- pure pieces (tests/benchmarks/test_compare.py) -------------------------------------------------

def read_baseline(text: str) -> str:
    """The ref in a BASELINE file: its first line that is neither blank nor a ``#`` comment."""
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            return line.split()[0]
    raise ValueError("benchmarks/BASELINE names no commit")


def pair_ratio(measure: Measure, ref: float, tree: float) -> float:
    """Above 1 when the working tree did better than REF in this pair."""
    return tree / ref if measure.higher_is_better else ref / tree


def ratios(pairs: list[dict], measure: Measure) -> list[float]:
    return [pair_ratio(measure, pair["ref"][measure.name], pair["tree"][measure.name]) for pair in pairs]


def judge(pairs: list[dict], measures: tuple[str, ...], fail_below: float) -> dict:
    """Per measure: the per-pair ratios, their median, each side's median value; and the
    measures whose median ratio is below `fail_below`, each with a message naming it."""
    out: dict = {"measures": {}, "failed": {}}
    for name in measures:
        measure = MEASURES[name]
        values = ratios(pairs, measure)
        median = statistics.median(values)
        out["measures"][name] = {
            "unit": measure.unit, "ratios": values, "median_ratio": median,
            "ref_median": statistics.median(p["ref"][name] for p in pairs),
            "tree_median": statistics.median(p["tree"][name] for p in pairs),
        }
        if median < fail_below:
            out["failed"][name] = (f"{name}: median ratio {median:.2f}x (pairs: {_list(values)}) is below "
                                   f"--fail-below {fail_below:.2f}x: the working tree is slower than REF")
    return out


def render(verdict: dict, header: str, fail_below: float) -> str:
    columns = (f"{'measure':<9} {'unit':<7} {'REF median':>11} {'tree median':>12}  {'median ratio':>12}  "
               "per-pair ratios")
    lines = [header, "ratios: working tree against REF within each pair; above 1 = the working tree is faster", columns]
    for name, m in verdict["measures"].items():
        lines.append(f"{name:<9} {m['unit']:<7} {_value(m['ref_median']):>11} {_value(m['tree_median']):>12}  "
                     f"{m['median_ratio']:>11.2f}x  {_list(m['ratios'])}")
    lines.append(f"gate (--fail-below {fail_below:.2f}x): "
                 + ("FAILED on " + ", ".join(verdict["failed"]) if verdict["failed"] else "passed"))
    return "\n".join(lines)


def _value(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.3f}"


def _list(values: list[float]) -> str:
    return " ".join(f"{v:.2f}" for v in values)


# -- the runs ---------------------------------------------------------------------------------------

def prepare(runs: CliRuns) -> None:
    """Migrate the side's database with its own CLI, then start its worker once on the empty
    queue (untimed): the worker path's bytecode is compiled and its files are in the page cache
    before the first timed run."""
    runs.work.mkdir(parents=True, exist_ok=True)
    (runs.work / f"{APP_MODULE}.py").write_text(APP_SOURCE)
    runs.run_to_end([*runs.sqla_queue_cli(), "--database-url", runs.db.sqlalchemy_url, "db", "upgrade"],
                    cwd=runs.work, what="sqla-queue db upgrade")
    runs.run_to_end(runs.worker_argv(1), cwd=runs.work, what="sqla-queue worker --until-empty")


def measure_pair(sides: dict[str, CliRuns], order: tuple[str, ...], args: argparse.Namespace) -> dict:
    """Every measure once for each side, the two sides' runs of one measure back to back in
    `order`: fill both by bulk enqueue, drain both with the CLI worker, then single enqueues
    into both emptied tables."""
    for side in order:
        tables.reset(sides[side].db)
    bulk = {side: _enqueue(sides[side], args.jobs, min(BULK_BATCH, args.jobs)) for side in order}
    for side in order:
        with sides[side].db.connect(autocommit=True) as conn:
            tables.settle(conn)
    drained = {side: _drain(sides[side], args.jobs, args.processes, args.concurrency) for side in order}
    for side in order:
        tables.reset(sides[side].db)
    single = {side: _enqueue(sides[side], args.enqueue_jobs, 1) for side in order}
    return {"first": order[0], **{
        side: {"drain": drained[side]["jobs_per_s"], "startup": drained[side]["startup_s"],
               "bulk": args.jobs / bulk[side]["seconds"], "enqueue": args.enqueue_jobs / single[side]["seconds"]}
        for side in SIDES}}


def _drain(runs: CliRuns, jobs: int, processes: int, concurrency: int) -> dict:
    clock = runs.start_together([(runs.worker_argv(concurrency), runs.work, runs.env())] * processes, "drain")
    drained = completion_figures(runs.completion_times(clock["db_start"]), jobs)
    if drained["incomplete"]:
        raise RuntimeError(f"the drain completed {drained['jobs']} of {jobs} jobs ({runs.bin_dir})")
    return drained


def _enqueue(runs: CliRuns, jobs: int, batch: int) -> dict:
    stdout, _ = runs.run_to_end(runs.enqueue_argv(jobs, batch), cwd=runs.work, what="enqueue")
    out = parse_enqueue_output(stdout)
    if tables.counts(runs.db).get("pending", 0) != jobs:
        raise RuntimeError(f"enqueue: expected {jobs} pending jobs, found {tables.counts(runs.db)}")
    return out


def run_pairs(sides: dict[str, CliRuns], args: argparse.Namespace, log) -> list[dict]:
    pairs = []
    for n in range(args.pairs):
        pair = measure_pair(sides, SIDES if n % 2 == 0 else SIDES[::-1], args)
        pairs.append(pair)
        log(f"pair {n + 1} ({pair['first']} first): " + "; ".join(
            f"{name} {_value(pair['ref'][name])} -> {_value(pair['tree'][name])} {m.unit} = "
            f"{pair_ratio(m, pair['ref'][name], pair['tree'][name]):.2f}x"
            for name, m in MEASURES.items() if name in args.measures))
    return pairs


# -- the command ------------------------------------------------------------------------------------

def measure_list(value: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in MEASURES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown measure(s) {', '.join(unknown) or '(none given)'}; "
                                         f"choose from {', '.join(MEASURES)}")
    return names


def setting(value: str) -> tuple[str, str]:
    name, sep, setting_value = value.partition("=")
    if not sep or not name.strip() or not setting_value.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {value!r}")
    return name.strip(), setting_value.strip()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ref", nargs="?", help="any git ref (default: the commit in benchmarks/BASELINE)")
    parser.add_argument("--pairs", type=int, default=5,
                        help=f"REF/working-tree pairs (at least {MIN_PAIRS}; default 5)")
    parser.add_argument("--jobs", type=int, default=5_000, help="no-op jobs per drain (default 5,000)")
    parser.add_argument("--enqueue-jobs", type=int, default=500, help="jobs enqueued one per call (default 500)")
    parser.add_argument("--processes", type=int, default=1, help="worker processes per drain (default 1)")
    parser.add_argument("--concurrency", type=int, default=10, help="each worker's --concurrency (default 10)")
    parser.add_argument("--measures", type=measure_list, default=DEFAULT_MEASURES,
                        help=f"what to report and gate on, comma-separated (default {','.join(DEFAULT_MEASURES)}): "
                        + "; ".join(f"{m.name}: {m.what}" for m in MEASURES.values()))
    parser.add_argument("--fail-below", type=float, default=0.7,
                        help="exit 1 when a measure's median ratio is below this (default 0.7; 0 never fails)")
    parser.add_argument("--database-url", help="create the two databases on this server instead of an embedded "
                        "PostgreSQL 18")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE", type=setting,
                        help="a setting for the embedded PostgreSQL (repeatable), e.g. synchronous_commit=off")
    parser.add_argument("--json", help="also write the pairs and the verdict here")
    args = parser.parse_args(argv)
    if args.pairs < MIN_PAIRS:
        parser.error(f"--pairs must be at least {MIN_PAIRS}: a median of fewer pairs is one run's noise")
    if min(args.jobs, args.enqueue_jobs, args.processes, args.concurrency) < 1:
        parser.error("--jobs, --enqueue-jobs, --processes and --concurrency must be positive")
    if args.setting and args.database_url:
        parser.error("--setting is for the embedded server; a --database-url server keeps its own settings")
    if args.ref is None:
        args.ref = read_baseline(BASELINE.read_text())
    return args


def main(argv: list[str]) -> int:
    from .__main__ import code_version

    args = parse_args(argv)
    t0 = time.monotonic()

    def log(message: str) -> None:
        print(f"{time.monotonic() - t0:7.1f}s {message}", file=sys.stderr, flush=True)

    commit = ref_env.resolve(args.ref)
    ref_bin = ref_env.ref_environment(commit, log)
    header = (f"python -m benchmarks compare: working tree ({code_version()}) "
              f"against REF {args.ref} = {commit[:12]}; "
              f"{args.pairs} pairs, each: {args.processes} x sqla-queue worker --concurrency {args.concurrency} "
              f"--until-empty draining {args.jobs:,} jobs, {args.enqueue_jobs:,} single enqueues; server: "
              + ("--database-url" if args.database_url else
                 "embedded PostgreSQL 18" + "".join(f", {k}={v}" for k, v in args.setting)))
    with benchmark_server(args.database_url, dict(args.setting)) as server, \
            tempfile.TemporaryDirectory(prefix="sqlaq-compare-") as tmp, \
            empty_database(server) as ref_db, empty_database(server) as tree_db:
        bins = {"ref": ref_bin, "tree": ref_env.tree_environment(Path(tmp) / "tree-venv")}
        sides = {side: CliRuns(db=db, work=Path(tmp) / side, log=log, bin_dir=bins[side])
                 for side, db in (("ref", ref_db), ("tree", tree_db))}
        for runs in sides.values():
            prepare(runs)
        log("both sides migrated and warmed up; measuring")
        pairs = run_pairs(sides, args, log)
    verdict = judge(pairs, args.measures, args.fail_below)
    print(render(verdict, header, args.fail_below), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"header": header, "ref": args.ref, "commit": commit,
                                               "fail_below": args.fail_below, "pairs": pairs, **verdict}, indent=1))
    for message in verdict["failed"].values():
        print(f"python -m benchmarks compare: {message}", file=sys.stderr)
    return 1 if verdict["failed"] else 0
