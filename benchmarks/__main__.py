"""``python -m benchmarks``: run every section (or those named by ``--sections``), print the
table, write the report and the plot. ``python -m benchmarks compare [REF]`` instead measures the
working tree against a git ref, side by side (benchmarks/compare.py)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console

from . import (asyncio_rows, claim_cost, cpu_scaling, drain, enqueue, fleet, history, horizon, idle, latency, limits,
               otel, peers, raw, report, roundtrips, sustained, wakeups, workflows)
from .server import benchmark_database, load_average, server_facts
from .sizes import SIZES

SECTIONS = ("raw", "enqueue", "drain", "latency", "claim_cost", "sustained", "idle", "asyncio", "roundtrips",
            "wakeups", "fleet", "cpu", "otel", "limits", "workflows", "horizon", "history", "peers")
# What runs without --sections: every section but the peers, which install pgqueuer and
# graphile-worker from PyPI and npm (--peers adds them).
DEFAULT_SECTIONS = tuple(name for name in SECTIONS if name != "peers")


def section_list(value: str) -> tuple[str, ...]:
    """``--sections idle,latency``: known names, run in the benchmark's own order."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in SECTIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown section(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(SECTIONS)}")
    return tuple(name for name in SECTIONS if name in names)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--out", help="report path; the PNG goes beside it (default docs/performance.md; "
                        "required with --sections, so a partial run never replaces the full report)")
    parser.add_argument("--sections", type=section_list, default=DEFAULT_SECTIONS,
                        help=f"comma-separated sections to run (default: all but peers): {','.join(SECTIONS)}")
    parser.add_argument("--peers", action="store_true",
                        help="also run sqla_queue beside pgqueuer and graphile-worker (section 9): installs them at "
                        "pinned versions under ~/.cache/sqla_queue_bench/peers ($SQLA_QUEUE_BENCH_CACHE) from PyPI "
                        "and npm (needs node and npm)")
    parser.add_argument("--size", choices=sorted(SIZES), default="full",
                        help="full: the published figures (~30-40 min); small: a quick look; tiny: CI")
    parser.add_argument("--repeat", type=int, help="repetitions per figure (default: the size's)")
    parser.add_argument("--database-url", help="use this server (a database is created and dropped there) "
                        "instead of starting an embedded PostgreSQL 18")
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG (no matplotlib needed)")
    parser.add_argument("--update", action="store_true", help="splice what this run measured (its sections and "
                        "their target rows) into the existing report at --out, keeping the rest as it was "
                        "(same --size only); the plot is left alone")
    parser.add_argument("--render", metavar="JSON", help="measure nothing: re-render the report and plot "
                        "from results written earlier with --json")
    args = parser.parse_args(argv)
    if args.peers and "peers" not in args.sections:
        args.sections = tuple(name for name in SECTIONS if name in (*args.sections, "peers"))
    if args.out is None:
        if set(args.sections) - {"peers"} != set(DEFAULT_SECTIONS) and not args.render and not args.update:
            parser.error("--sections needs --out (or --update): a partial run must not replace "
                         "docs/performance.md")
        args.out = "docs/performance.md"
    return args


def main(argv: list[str] | None = None) -> int:
    if (sys.argv[1:] if argv is None else argv)[:1] == ["compare"]:
        from . import compare

        return compare.main((sys.argv[1:] if argv is None else argv)[1:])
    args = parse_args(argv)
    if args.render:
        results = json.loads(Path(args.render).read_text())
        write_outputs(results, Path(args.out), plot=not args.no_plot, json_path=None, update=args.update)
        report.print_summary(results, Console(width=200))
        return 0
    size = SIZES[args.size].with_repeat(args.repeat)
    if args.update:  # refused before measuring anything, not after
        try:
            report.check_update(Path(args.out).read_text(), size.name)
        except (OSError, ValueError) as exc:
            sys.exit(f"python -m benchmarks --update: {exc}")
    console = Console(stderr=True, width=160)
    t0 = time.monotonic()

    def log(message: str) -> None:
        console.print(f"[dim]{time.monotonic() - t0:7.1f}s[/dim] {message}", highlight=False)

    started, load_start = _now(), load_average()
    results: dict = {}

    def checkpoint() -> None:  # a late failure keeps what was measured
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(results, indent=1, default=str))

    with benchmark_database(args.database_url) as db:
        facts = server_facts(db)
        log(f"server: {facts['postgres_version']}; size {size.name}, {size.repeat} repetition(s)")
        runners = {
            "raw": lambda: {"claim": raw.claim_limit(db, size, raw.CLAIM_BATCHES, log),
                            "enqueue": raw.enqueue_limit(db, size, log)},
            "enqueue": lambda: enqueue.run(db, size, log),
            "drain": lambda: drain.run(db, size, log),
            "latency": lambda: latency.run(db, size, log),
            "claim_cost": lambda: claim_cost.run(db, size, log),
            "sustained": lambda: sustained.run(db, size, log,
                                               raw_batch=_sustained_batch(results.get("drain") or {}),
                                               drain_rate=_drain_rate(results.get("drain") or {})),
            "idle": lambda: idle.run(db, size, log),
            "asyncio": lambda: asyncio_rows.run(db, size, log),
            "roundtrips": lambda: _roundtrips(db, size, log),
            "wakeups": lambda: wakeups.run(db, size, log),
            "fleet": lambda: fleet.run(db, size, log),
            "cpu": lambda: cpu_scaling.run(db, size, log),
            "otel": lambda: otel.run(db, size, log),
            "limits": lambda: limits.run(db, size, log),
            "workflows": lambda: workflows.run(db, size, log),
            "horizon": lambda: horizon.run(db, size, log, drain_rate=_drain_rate(results.get("drain") or {})),
            "history": lambda: history.run(db, size, log),
            "peers": lambda: peers.run(db, size, log),
        }
        for name in args.sections:
            results[name] = runners[name]()
            checkpoint()
    results["meta"] = {
        "command": "python -m benchmarks " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])),
        "size": size.name, "repeat": size.repeat, "sections": list(args.sections),
        "started": started, "finished": _now(),
        "duration_s": time.monotonic() - t0, "load_start": load_start, "load_end": load_average(),
        "facts": facts, "raw_methods": raw.methods(db), "code_version": code_version(),
    }
    write_outputs(results, Path(args.out), plot=not args.no_plot, json_path=args.json, update=args.update)
    report.print_summary(results, Console(width=200))
    plotted = not args.no_plot and not args.update and all(results.get(key) is not None for key in _PLOTTED)
    log(f"wrote {args.out}" + (f" and {Path(args.out).with_suffix('.png')}" if plotted else ""))
    return 0


def write_outputs(results: dict, out: Path, *, plot: bool, json_path: str | None, update: bool = False) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    png = out.with_suffix(".png")
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=1, default=str))
    if update:
        out.write_text(report.update_markdown(out.read_text(), results))
        return
    plot = plot and all(results.get(key) is not None for key in _PLOTTED)
    if plot:
        from . import plot as plotting

        plotting.draw(results, png)
    out.write_text(report.render_markdown(results, png.name if plot else None))


_PLOTTED = ("raw", "enqueue", "drain", "latency", "sustained")  # what the PNG draws from


def _sustained_batch(drains: dict) -> int:
    """The batch size the 2 x 10 drain used, for the sustained drain's raw reference (10, its
    concurrency, when the drain section was not run)."""
    d = drains.get("2x10") or next(iter(drains.values()), None)
    return max(1, round(d["batch"]["median"] or 1)) if d else 10


def _drain_rate(drains: dict) -> float | None:
    """The 2 x 10 drain's median jobs/s, for the held-horizon section's feed (None: not run)."""
    d = drains.get("2x10")
    return d["jobs_per_s"]["median"] if d else None


def _roundtrips(db, size, log) -> dict | None:
    try:
        return roundtrips.run(db, size, log)
    except Exception as exc:  # a diagnostic, not a figure: the report goes out without it
        log(f"WARNING: statement counts skipped: {exc!r}")
        return None


def code_version() -> str:
    """Which sqla_queue was measured: $SQLA_QUEUE_BENCH_CODE_VERSION, else the git commit of
    the checkout it was imported from, with the files that differ from that commit."""
    given = os.environ.get("SQLA_QUEUE_BENCH_CODE_VERSION")
    if given:
        return given
    import sqla_queue

    where = Path(sqla_queue.__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=where, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=where, capture_output=True,
                               text=True, check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return f"{where} (not a git checkout)"
    changed = [line[3:] for line in dirty if line.strip()]
    return f"commit {head}" + (f" plus uncommitted changes to {', '.join(changed)}" if changed else "")


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


if __name__ == "__main__":
    sys.exit(main())
