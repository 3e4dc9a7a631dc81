"""``enqueue``, ``stats`` and ``recover``: everyday commands on an app's queue."""

from __future__ import annotations

import json
import sys
from datetime import timedelta

import click
from rich.console import Console
from rich.table import Table

from . import CliContext, main
from ..errors import InvalidInputError
from ..queue import DEFAULT_LEASE
from ..types import QueueStats


@main.command()
@click.argument("task")
@click.argument("payload", default="{}")
@click.option("--queue", help="Queue name (default: the task's).")
@click.option("--delay", type=float, metavar="SECONDS", help="Run no earlier than this many seconds from now.")
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
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def stats(obj: CliContext, as_json: bool) -> None:
    """Queue-health signals per queue."""
    result = obj.queue().stats()
    if as_json:
        click.echo(json.dumps(stats_as_dict(result), indent=2))
    else:
        console().print(stats_table(result))


@main.command()
@click.option("--lease", type=float, default=DEFAULT_LEASE.total_seconds(), show_default=True,
              metavar="SECONDS", help="A running job whose lease started longer ago than this is expired.")
@click.option("--limit", type=int, default=100, show_default=True, help="At most this many jobs per kind.")
@click.pass_obj
def recover(obj: CliContext, lease: float, limit: int) -> None:
    """Return jobs with expired leases to pending (or failed, on their last attempt)."""
    if lease <= 0:
        raise InvalidInputError(f"--lease must be positive, got {lease}")
    ids = obj.queue().recover_expired(lease=timedelta(seconds=lease), limit=limit)
    click.echo(f"recovered {len(ids)} job(s)" + (f": {', '.join(map(str, ids))}" if ids else ""))


def console() -> Console:
    """A terminal gets its own width; a pipe gets a wide one, so tables never truncate names."""
    return Console() if sys.stdout.isatty() else Console(width=200)


def stats_as_dict(result: QueueStats) -> dict:
    def encode(value):
        return value.total_seconds() if isinstance(value, timedelta) else value

    return {h.queue: {k: encode(v) for k, v in vars(h).items() if k != "queue"} for h in result}


def stats_table(result: QueueStats) -> Table:
    table = Table(title="sqla_queue")
    columns = ("pending", "eligible", "scheduled", "running", "completed", "failed",
               "oldest_eligible_age", "near_max_attempts")
    table.add_column("queue", no_wrap=True)
    for column in columns:
        table.add_column(column.replace("_", " "), justify="right")
    for health in result:
        values = [getattr(health, c) for c in columns]
        table.add_row(health.queue, *(_cell(v) for v in values))
    return table


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, timedelta):
        return f"{value.total_seconds():.1f}s"
    return str(value)
