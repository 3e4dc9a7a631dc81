"""``queues list / pause / resume / limit``: see the queues, stop or restart claiming from one,
set its limits.

A pause is stored in the database, so it reaches every worker of every host at its next claim
(within one poll interval); running jobs finish and enqueues still land. Limits are stored the
same way and enforced by every claim (docs/how-to/limits.md).
"""

from __future__ import annotations

import json

import click
from rich.table import Table

from ..types import QueueLimits, QueueState
from ._params import console, timestamp
from .root import CliContext, main


@main.group()
def queues() -> None:
    """List queues, pause one (workers stop claiming from it), resume it, set its limits."""


@queues.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def list_(obj: CliContext, as_json: bool) -> None:
    """Queues with active jobs, a pause record or limits: paused since when, pending and running
    jobs, limits."""
    states = obj.queue().list_queues()
    if as_json:
        click.echo(json.dumps([queue_dict(state) for state in states], indent=2, ensure_ascii=False))
        return
    table = Table(title_justify="left")
    for column in ("queue", "state", "paused since", "pending", "running", "limits"):
        table.add_column(column, no_wrap=True, justify="right" if column in ("pending", "running") else "left")
    for state in states:
        table.add_row(state.name, "paused" if state.paused else "active", timestamp(state.paused_at),
                      str(state.pending), str(state.running), _limits_text(state.limits))
    console().print(table)


def queue_dict(state: QueueState) -> dict:
    return {"name": state.name, "paused": state.paused,
            "paused_at": state.paused_at.isoformat() if state.paused_at else None,
            "pending": state.pending, "running": state.running,
            "limits": None if state.limits is None else state.limits.as_dict()}


def _limits_text(limits: QueueLimits | None) -> str:
    return "-" if limits is None else limits.describe()


@queues.command()
@click.argument("name")
@click.pass_obj
def pause(obj: CliContext, name: str) -> None:
    """Stop every worker claiming jobs of queue NAME (running jobs finish; enqueues still land)."""
    state = obj.queue().pause(name)
    click.echo(f"queue {state.name} is paused since {timestamp(state.paused_at)}: workers claim none of its "
               f"{state.pending} pending job(s) until `queues resume {state.name}`; "
               f"{state.running} running job(s) finish")


@queues.command()
@click.argument("name")
@click.pass_obj
def resume(obj: CliContext, name: str) -> None:
    """Let workers claim jobs of queue NAME again."""
    state = obj.queue().resume(name)
    click.echo(f"queue {state.name} is active: workers claim its {state.pending} pending job(s) again")


@queues.command()
@click.argument("name")
@click.option("--concurrency", type=click.IntRange(min=1), help="Running jobs of the queue at most, across every worker.")
@click.option("--group-concurrency", type=click.IntRange(min=1),
              help="Running jobs per group key at most (1: one at a time per key).")
@click.option("--rate", help="Job starts of the queue at most, as COUNT/PERIOD: 100/s, 5/m, 1000/h.")
@click.option("--group-rate", help="Job starts per group key at most, as COUNT/PERIOD.")
@click.option("--fair/--no-fair", default=None, help="Claim from the group keys in turn (round-robin).")
@click.option("--clear", is_flag=True, help="Remove every limit of the queue (with no other option).")
@click.pass_obj
def limit(obj: CliContext, name: str, concurrency, group_concurrency, rate, group_rate, fair, clear: bool) -> None:
    """Set limits of queue NAME, enforced by every worker's claim at once; options not given
    keep their value. Prints the queue's limits."""
    given = {key: value for key, value in (("concurrency", concurrency), ("group_concurrency", group_concurrency),
                                            ("rate", rate), ("group_rate", group_rate), ("fair", fair))
             if value is not None}
    if clear == bool(given):
        raise click.UsageError("give --clear, or at least one limit (--concurrency, --group-concurrency, --rate, "
                               "--group-rate, --fair/--no-fair), not both")
    queue = obj.queue()
    if clear:
        given = dict.fromkeys(("concurrency", "group_concurrency", "rate", "group_rate", "fair"))
    limits = queue.set_limits(name, **given)
    click.echo(f"queue {name}: limits {_limits_text(limits) if limits else 'none'}")
