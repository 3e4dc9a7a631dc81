"""``enqueue``, ``stats`` and ``recover``: everyday commands on an app's queue."""

from __future__ import annotations

import itertools
import json
import sys
import time
from datetime import timedelta

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from . import CliContext, main
from ._params import DURATION, DURATION_HELP, DURATION_OR_ZERO, format_seconds, timestamp
from ..doctor import format_duration
from ..queue import DEFAULT_LEASE
from ..types import QueueHealth, QueueStats


@main.command()
@click.argument("task")
@click.argument("payload", default="{}")
@click.option("--queue", help="Queue name (default: the task's).")
@click.option("--delay", type=DURATION_OR_ZERO,
              help=f"Run no earlier than this long from now (0: now). {DURATION_HELP}")
@click.option("--max-attempts", type=int, help="Attempts before the job fails for good.")
@click.option("--idempotency-key", help="Dedupe key: an active job with it is returned instead.")
@click.pass_obj
def enqueue(obj: CliContext, task, payload, queue, delay, max_attempts, idempotency_key) -> None:
    """Enqueue TASK with a JSON object PAYLOAD; prints the job id."""
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON ({exc.msg} at column {exc.colno})", param_hint="PAYLOAD") from None
    job_id = obj.queue().enqueue(
        task, data, queue=queue, delay=delay, max_attempts=max_attempts, idempotency_key=idempotency_key
    )
    click.echo(job_id)


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


@main.command()
@click.option("--lease", type=DURATION, default=format_seconds(DEFAULT_LEASE), show_default=True,
              help=f"A running job whose lease started longer ago than this is expired. {DURATION_HELP}")
@click.option("--limit", type=int, default=100, show_default=True, help="At most this many jobs per kind.")
@click.pass_obj
def recover(obj: CliContext, lease: timedelta, limit: int) -> None:
    """Return jobs with expired leases to pending (or failed, on their last attempt)."""
    ids = obj.queue().recover_expired(lease=lease, limit=limit)
    click.echo(f"recovered {len(ids)} job(s)" + (f": {', '.join(map(str, ids))}" if ids else ""))


def console() -> Console:
    """A terminal gets its own width; a pipe gets a wide one, so tables never truncate names."""
    return Console() if sys.stdout.isatty() else Console(width=200)


def stats_as_dict(result: QueueStats) -> dict:
    """Every queue (idle ones too) with every signal; durations in seconds, times in ISO 8601."""

    def encode(value):
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
WINDOW_COLUMNS = ("completed", "failed", "retried", "lease_recoveries", "duration_p50", "duration_p95",
                  "duration_max")
EMPTY_COLUMNS = ("empty_claims_locked", "empty_claims_scheduled", "empty_claims_exhausted",
                 "empty_claims_other_queue")


def stats_tables(result: QueueStats) -> Group:
    """Three tables: jobs now; what finished and happened in the window; claims that came back
    empty while jobs were pending, by reason. Idle queues appear in the last two."""
    window = format_duration(result.window)
    everyone = [*result, *result.idle.values()]
    return Group(
        _table("jobs now", NOW_COLUMNS, list(result)),
        _table(f"last {window}", WINDOW_COLUMNS, everyone, result.idle),
        _table(f"empty claims while jobs were pending, last {window}", EMPTY_COLUMNS, everyone,
               result.idle, strip="empty_claims_"),
    )


def _table(title: str, columns, healths, idle=(), strip: str = "") -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("queue", no_wrap=True)
    for column in columns:
        table.add_column(column.removeprefix(strip).replace("_", " "), justify="right")
    for health in healths:
        name = f"{health.queue} (idle)" if health.queue in idle else health.queue
        table.add_row(name, *(_cell(getattr(health, c)) for c in columns))
    return table


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, timedelta):
        return format_duration(value)
    return str(value)
