"""``python -m sqla_queue.testing.chaos --seeds N --jobs M [--seed S] --json``

Runs seeds S, S+1, ... S+N-1 (S defaults to 1), one after another, on a PostgreSQL the runner
starts for itself; prints a line per seed (with the command that replays a failing one) and,
with ``--json``, a JSON summary as the last line. Exit status 1 when any seed failed.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import click

from .checker import FAILURE_CLASSES
from .runner import SeedResult, chaos_server, run_seed


def replay_command(seed: int, jobs: int) -> str:
    return f"python -m sqla_queue.testing.chaos --seeds 1 --seed {seed} --jobs {jobs} --json"


def summary(results: list[SeedResult], out: Path) -> dict:
    totals = {name: sum(r.verdict.counts()[name] for r in results) for name in (*FAILURE_CLASSES, "in_doubt")}
    return {
        "seeds": len(results),
        **totals,
        "failures": [{"seed": r.seed, "replay": replay_command(r.seed, r.jobs), "logs": str(r.logs),
                      "classes": {k: v for k, v in r.verdict.classes.items() if v and k in FAILURE_CLASSES}}
                     for r in results if r.verdict.failed],
        "seconds_per_seed": round(sum(r.seconds for r in results) / max(len(results), 1), 2),
        "logs": str(out),
    }


def describe(result: SeedResult) -> str:
    counts = result.verdict.counts()
    found = ", ".join(f"{name} {counts[name]}" for name in FAILURE_CLASSES if counts[name]) or "ok"
    line = f"seed {result.seed}: {found} (in doubt {counts['in_doubt']}, {result.seconds:.1f} s)"
    return f"{line}; replay: {replay_command(result.seed, result.jobs)}" if result.verdict.failed else line


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--seeds", type=click.IntRange(min=1), default=1, show_default=True, help="How many seeds to run.")
@click.option("--jobs", type=click.IntRange(min=1, max=10_000), default=40, show_default=True,
              help="Jobs in each seed's workload.")
@click.option("--seed", "first", type=click.IntRange(min=0), default=1, show_default=True, help="The first seed.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Where each seed's logs go (default: a new directory under the temp dir).")
@click.option("--json", "as_json", is_flag=True, help="End with a JSON summary line.")
def main(seeds: int, jobs: int, first: int, out: Path | None, as_json: bool) -> None:
    """Seeded fault schedules against real worker processes and a PostgreSQL of the runner's own."""
    out = out or Path(tempfile.mkdtemp(prefix="sqla_queue-chaos-"))
    results = []
    with chaos_server() as (server, template):
        for seed in range(first, first + seeds):
            result = run_seed(seed, jobs, server, template, out)
            results.append(result)
            click.echo(describe(result))
    report = summary(results, out)
    if as_json:
        click.echo(json.dumps(report))
    sys.exit(1 if report["failures"] else 0)


if __name__ == "__main__":
    main()
