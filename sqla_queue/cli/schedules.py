"""``schedules``: the application's periodic schedules, with their last and next tick.

The schedules are declared in the application's code (`Queue.periodic`), so this command needs
``--app``; the last ticks come from the database (``<table>_schedules``), the next ones are
computed from this machine's clock, as a worker computes them.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import click
from rich.table import Table

from ..core.schedules import Schedule
from ..queue import Queue
from ..services.scheduler import last_ticks
from ._params import console, timestamp
from .root import APP_ENV, CliContext, main

COLUMNS = ("name", "task", "schedule", "timezone", "queue", "last tick", "next tick")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def schedules(obj: CliContext, as_json: bool) -> None:
    """Periodic schedules: what runs when, the last tick enqueued and the next one (UTC)."""
    if not obj.app:
        raise click.UsageError(
            f"`schedules` lists the schedules your application declares: it needs --app "
            f"module.path:queue_object (or ${APP_ENV})"
        )
    queue = obj.queue()
    rows = schedule_rows(queue, datetime.now(timezone.utc))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    elif not rows:
        click.echo(f"no schedules: {obj.app} declares none (@queue.periodic)")
    else:
        console().print(_table(rows))


def schedule_rows(queue: Queue, now: datetime) -> list[dict]:
    """One dict per schedule; ticks in ISO 8601 UTC, ``last_tick`` None when it never ran."""
    last = last_ticks(queue.core)
    return [_row(queue, schedule, last.get(schedule.name), now) for schedule in queue.schedules]


def _row(queue: Queue, schedule: Schedule, last: datetime | None, now: datetime) -> dict:
    return {
        "name": schedule.name,
        "task": schedule.task,
        "schedule": schedule.spec,
        "timezone": schedule.timezone,
        "queue": schedule.queue or queue.get_task(schedule.task).queue,
        "backfill": schedule.backfill,
        "last_tick": None if last is None else last.astimezone(timezone.utc).isoformat(),
        "next_tick": schedule.next_tick(now).isoformat(),
    }


def _table(rows: list[dict]) -> Table:
    table = Table(title_justify="left")
    for column in COLUMNS:
        table.add_column(column, no_wrap=True)
    for row in rows:
        last = "never" if row["last_tick"] is None else timestamp(datetime.fromisoformat(row["last_tick"]))
        schedule = row["schedule"] + (" (backfill)" if row["backfill"] else "")
        table.add_row(row["name"], row["task"], schedule, row["timezone"], row["queue"], last,
                      timestamp(datetime.fromisoformat(row["next_tick"])))
    return table
