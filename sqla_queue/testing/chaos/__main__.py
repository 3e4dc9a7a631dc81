"""``python -m sqla_queue.testing.chaos --seeds N --jobs M [--seed S] [--parallel K] [--app A] --json``

Runs seeds S, S+1, ... S+N-1 (S defaults to 1), one after another on a PostgreSQL the runner
starts for itself, or K at a time on K servers of its own; prints a line per seed, in seed
order (with the command that replays a failing one) and, with ``--json``, a JSON summary as the
last line. Exit status 1 when any seed failed.
"""

from __future__ import annotations

import json
import queue
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click

from . import app
from .checker import FAILURE_CLASSES
from .runner import SeedResult, chaos_server, run_seed


def replay_command(seed: int, jobs: int, app_spec: str | None = None) -> str:
    command = f"python -m sqla_queue.testing.chaos --seeds 1 --seed {seed} --jobs {jobs} --json"
    return command if app_spec is None else f"{command} --app {app_spec}"


def summary(results: list[SeedResult], out: Path) -> dict:
    totals = {name: sum(r.verdict.counts()[name] for r in results) for name in (*FAILURE_CLASSES, "in_doubt")}
    return {
        "seeds": len(results),
        **totals,
        "failures": [{"seed": r.seed, "replay": replay_command(r.seed, r.jobs, r.app), "logs": str(r.logs),
                      "classes": {k: v for k, v in r.verdict.classes.items() if v and k in FAILURE_CLASSES}}
                     for r in results if r.verdict.failed],
        "seconds_per_seed": round(sum(r.seconds for r in results) / max(len(results), 1), 2),
        "logs": str(out),
    }


def describe(result: SeedResult) -> str:
    counts = result.verdict.counts()
    found = ", ".join(f"{name} {counts[name]}" for name in FAILURE_CLASSES if counts[name]) or "ok"
    line = f"seed {result.seed}: {found} (in doubt {counts['in_doubt']}, {result.seconds:.1f} s)"
    return f"{line}; replay: {replay_command(result.seed, result.jobs, result.app)}" if result.verdict.failed else line


def run_seeds(seeds: range, jobs: int, out: Path, parallel: int, app_spec: str | None,
              report: Callable[[SeedResult], None]) -> list[SeedResult]:
    """Every seed, on `parallel` servers of the runner's own, each taking the next seed when it is
    free; `report` sees the results in seed order as soon as they are."""
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for seed in seeds:
        todo.put(seed)
    done: dict[int, SeedResult] = {}
    ordered: list[SeedResult] = []
    lock = threading.Lock()
    made_by = app.load(app_spec) if app_spec else None

    def stream() -> None:
        with chaos_server(made_by) as (server, template):
            while True:
                try:
                    seed = todo.get_nowait()
                except queue.Empty:
                    return
                result = run_seed(seed, jobs, server, template, out, app_spec)
                with lock:
                    done[seed] = result
                    while (next_seed := seeds[len(ordered)] if len(ordered) < len(seeds) else None) in done:
                        ordered.append(done.pop(next_seed))
                        report(ordered[-1])

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for future in [pool.submit(stream) for _ in range(min(parallel, len(seeds)))]:
            future.result()
    return ordered


def checked_app(spec: str | None, seeds: range, jobs: int) -> str | None:
    """`spec` once its App loads and every job of every seed names a task (else a usage error)."""
    if spec is None:
        return None
    try:
        made_by = app.load(spec)
        for seed in seeds:
            app.check_jobs(made_by, seed, jobs)
    except app.AppError as error:
        raise click.BadParameter(str(error), param_hint="--app") from None
    return spec


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--seeds", type=click.IntRange(min=1), default=1, show_default=True, help="How many seeds to run.")
@click.option("--jobs", type=click.IntRange(min=1, max=10_000), default=40, show_default=True,
              help="Jobs in each seed's workload.")
@click.option("--seed", "first", type=click.IntRange(min=0), default=1, show_default=True, help="The first seed.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Where each seed's logs go (default: a new directory under the temp dir).")
@click.option("--parallel", type=click.IntRange(min=1, max=16), default=1, show_default=True,
              help="Seeds run at once, each stream on a PostgreSQL of its own.")
@click.option("--app", "app_spec", metavar="MODULE:ATTRIBUTE",
              help="Run your handlers: a sqla_queue.testing.chaos.App naming your queue and its jobs.")
@click.option("--json", "as_json", is_flag=True, help="End with a JSON summary line.")
def main(seeds: int, jobs: int, first: int, out: Path | None, parallel: int, app_spec: str | None,
         as_json: bool) -> None:
    """Seeded fault schedules against real worker processes and a PostgreSQL of the runner's own."""
    chosen = range(first, first + seeds)
    app_spec = checked_app(app_spec, chosen, jobs)
    out = out or Path(tempfile.mkdtemp(prefix="sqla_queue-chaos-"))
    results = run_seeds(chosen, jobs, out, parallel, app_spec, lambda result: click.echo(describe(result)))
    report = summary(results, out)
    if as_json:
        click.echo(json.dumps(report))
    sys.exit(1 if report["failures"] else 0)


if __name__ == "__main__":
    main()
