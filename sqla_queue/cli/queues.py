"""``queues list / pause / resume``: see the queues and stop or restart claiming from one.

A pause is stored in the database, so it reaches every worker of every host at its next claim
(within one poll interval); running jobs finish and enqueues still land.
"""

from __future__ import annotations

import json

import click
from rich.table import Table

from ..types import QueueState
from ._params import console, timestamp
from .root import CliContext, main


@main.group()
def queues() -> None:
    """List queues, pause one (workers stop claiming from it), resume it."""


@queues.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def list_(obj: CliContext, as_json: bool) -> None:
    """Queues with active jobs or a pause record: paused since when, pending and running jobs."""
    states = obj.queue().list_queues()
    if as_json:
        click.echo(json.dumps([queue_dict(state) for state in states], indent=2, ensure_ascii=False))
        return
    table = Table(title_justify="left")
    for column in ("queue", "state", "paused since", "pending", "running"):
        table.add_column(column, no_wrap=True, justify="right" if column in ("pending", "running") else "left")
    for state in states:
        table.add_row(state.name, "paused" if state.paused else "active", timestamp(state.paused_at),
                      str(state.pending), str(state.running))
    console().print(table)


def queue_dict(state: QueueState) -> dict:
    return {"name": state.name, "paused": state.paused,
            "paused_at": state.paused_at.isoformat() if state.paused_at else None,
            "pending": state.pending, "running": state.running}


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
