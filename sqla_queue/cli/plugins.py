"""``sqla-queue plugins``: which plugins a Queue runs, where each came from, what it hooks.

With ``--app`` it lists that Queue's own plugin manager (explicit ``plugins=`` included, the
app's blocked names honoured). Without, it lists what a ``Queue(engine)`` built here would load:
the built-ins and the installed entry points, no database needed.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import click
from rich.table import Table

from . import CliContext, main
from .._plugins import PluginInfo, build_plugin_manager, describe_plugins
from .jobs import console

_PREFIX = "sqla_queue_"


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def plugins(obj: CliContext, as_json: bool) -> None:
    """List plugins: name, source (builtin, entry point, explicit), distribution, hooks.

    Newest registration first, blocked names last. Strategy hooks ask per-task options first
    and the built-in defaults last, whatever the listing order.
    """
    manager = obj.queue().plugin_manager if obj.app else build_plugin_manager(tasks=None)
    infos = describe_plugins(manager)
    if as_json:
        click.echo(json.dumps([asdict(info) for info in infos], indent=2))
    else:
        console().print(plugins_table(infos))


def plugins_table(infos: list[PluginInfo]) -> Table:
    """Hook names lose their common ``sqla_queue_`` prefix to keep the table readable."""
    table = Table(title="sqla_queue plugins")
    for column in ("name", "source", "distribution", "hooks"):
        table.add_column(column, no_wrap=column != "hooks")
    for info in infos:
        hooks = "blocked" if info.blocked else ", ".join(h.removeprefix(_PREFIX) for h in info.hooks)
        table.add_row(info.name, info.source, info.distribution or "-", hooks)
    return table
