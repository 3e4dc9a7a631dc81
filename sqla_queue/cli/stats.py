"""``stats``: queue-health signals per queue, as tables or JSON, once or every --watch."""

from __future__ import annotations

import itertools
import json
import sys
import time
from datetime import timedelta

import click
from rich.console import Group
from rich.live import Live
from rich.table import Table

from ..ops.formatting import format_duration
from ..reports import QueueHealth, QueueStats
from ..types import QueueLimits
from ._params import DURATION, DURATION_HELP, console, timestamp
from .root import CliContext, main


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables (one line per refresh with --watch).")
@click.option("--window", type=DURATION, default="15m", show_default=True,
              help="Look-back of the windowed signals (completions, failures, retries, empty claims). "
                   + DURATION_HELP)
@click.option("--watch", type=DURATION, help=f"Refresh this often until Ctrl-C. {DURATION_HELP}")
@click.option("--count", type=click.IntRange(min=1), help="With --watch: stop after this many refreshes.")
@click.pass_obj
def stats(obj: CliContext, as_json: bool, window: timedelta, watch: timedelta | None, count: int | None) -> None:
    """Queue-health signals per queue: jobs now, and what happened in the last --window."""
    if count is not None and watch is None:
        raise click.UsageError("--count needs --watch")
    queue = obj.queue()
    if watch is None:
        _show_stats(queue.stats(window=window), as_json)
        return
    try:
        _watch_stats(queue, window, watch, count, as_json)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a watch ends


def _show_stats(result: QueueStats, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(stats_as_dict(result), indent=2))
    else:
        console().print(stats_tables(result))


def _watch_stats(queue, window: timedelta, every: timedelta, count: int | None, as_json: bool) -> None:
    """A terminal redraws in place (rich Live); a pipe gets one JSON line, or one set of tables
    under a timestamp, per refresh."""
    refreshes = itertools.count(1)
    out = console()
    if as_json or not out.is_terminal:
        for n in refreshes:
            result = queue.stats(window=window)
            if as_json:
                click.echo(json.dumps(stats_as_dict(result)), nl=True)
            else:
                out.print(f"-- {timestamp(result.measured_at)}")
                out.print(stats_tables(result))
            sys.stdout.flush()  # a pipe (tee, a log shipper) sees each refresh when it happens
            if n == count:
                return
            time.sleep(every.total_seconds())
    with Live(stats_tables(queue.stats(window=window)), console=out, auto_refresh=False) as live:
        for n in refreshes:
            if n == count:
                return
            time.sleep(every.total_seconds())
            live.update(stats_tables(queue.stats(window=window)), refresh=True)


def stats_as_dict(result: QueueStats) -> dict:
    """Every queue (idle ones too) with every signal; durations in seconds, times in ISO 8601."""

    def encode(value):
        if isinstance(value, QueueLimits):
            return value.as_dict()
        return value.total_seconds() if isinstance(value, timedelta) else value

    def one(health: QueueHealth, idle: bool) -> dict:
        fields = {k: encode(v) for k, v in vars(health).items() if k != "queue"}
        return {**fields, "empty_claims": health.empty_claims, "idle": idle,
                "window_seconds": result.window.total_seconds(),
                "measured_at": result.measured_at.isoformat() if result.measured_at else None}

    queues = {h.queue: one(h, False) for h in result}
    queues.update({h.queue: one(h, True) for h in result.idle.values()})
    return queues


NOW_COLUMNS = ("pending", "eligible", "scheduled", "running", "oldest_eligible_age", "near_max_attempts")
WINDOW_COLUMNS = ("completed", "failed", "cancelled", "retried", "lease_recoveries", "duration_p50", "duration_p95",
                  "duration_max")
EMPTY_COLUMNS = ("empty_claims_locked", "empty_claims_scheduled", "empty_claims_exhausted",
                 "empty_claims_other_queue")


def stats_tables(result: QueueStats) -> Group:
    """Three tables: jobs now; what finished and happened in the window; claims that came back
    empty while jobs were pending, by reason. Idle queues appear in the last two; a paused
    queue is marked in all three. A fourth when a queue has limits: them, and its claims a
    limit held back in the window (throttled)."""
    window = format_duration(result.window)
    everyone = [*result, *result.idle.values()]
    tables = [
        _table("jobs now", NOW_COLUMNS, list(result)),
        _table(f"last {window}", WINDOW_COLUMNS, everyone, result.idle),
        _table(f"empty claims while jobs were pending, last {window}", EMPTY_COLUMNS, everyone,
               result.idle, strip="empty_claims_"),
    ]
    limited = [health for health in everyone if health.limits is not None or health.throttled]
    if limited:
        tables.append(_table(f"limits, and claims they held back in the last {window}", ("limits", "throttled"),
                             limited, result.idle))
    return Group(*tables)


def _table(title: str, columns, healths, idle=(), strip: str = "") -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("queue", no_wrap=True)
    for column in columns:
        table.add_column(column.removeprefix(strip).replace("_", " "), justify="right")
    for health in healths:
        name = health.queue + (" (idle)" if health.queue in idle else "") + (" (paused)" if health.paused else "")
        table.add_row(name, *(_cell(getattr(health, c)) for c in columns))
    return table


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, QueueLimits):
        return value.describe()
    if isinstance(value, timedelta):
        return format_duration(value)
    return str(value)
