"""``sqla-queue plugins``: which plugins a Queue runs, where each came from, what it hooks.

With ``--app`` it lists that Queue's own plugin manager (explicit ``plugins=`` included, the
app's blocked names honoured). Without, it lists what a ``Queue(engine)`` built here would load:
the built-ins and the installed entry points, no database needed. Either way an installed
plugin that implements a strategy hook and was not enabled by name is listed as ``available``
with how to enable it (``--plugin NAME`` before the command, ``SQLA_QUEUE_PLUGINS`` or
``plugins=[...]``).
"""

from __future__ import annotations

import json
from dataclasses import asdict

import click
from rich.table import Table

from ..plugins.manager import PluginInfo, build_plugin_manager, describe_plugins
from ._params import console
from .root import CliContext, main

_PREFIX = "sqla_queue_"


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def plugins(obj: CliContext, as_json: bool) -> None:
    """List plugins: name, status (enabled, available, blocked), source, distribution, hooks.

    Enabled plugins come first, newest registration first; then installed plugins that were
    not enabled (with the reason); blocked names last. Strategy hooks ask per-task options
    first and the built-in defaults last, whatever the listing order.
    """
    manager = obj.queue().plugin_manager if obj.app else build_plugin_manager(tasks=None)
    infos = describe_plugins(manager)
    if as_json:
        click.echo(json.dumps([asdict(info) for info in infos], indent=2))
    else:
        console().print(plugins_table(infos))
        for info in infos:
            if info.note:  # one unwrapped line each: the command to copy must stay whole
                click.echo(f"{info.name} is not enabled: {info.note}")


def plugins_table(infos: list[PluginInfo]) -> Table:
    """Hook names lose their common ``sqla_queue_`` prefix to keep the table readable; why an
    available plugin is not enabled is printed under the table."""
    table = Table(title="sqla_queue plugins")
    for column in ("name", "status", "source", "distribution", "hooks"):
        table.add_column(column, no_wrap=column not in ("hooks", "status"))
    for info in infos:
        hooks = ", ".join(h.removeprefix(_PREFIX) for h in info.hooks) or "-"
        table.add_row(info.name, _status(info), info.source, info.distribution or "-", hooks)
    return table


def _status(info: PluginInfo) -> str:
    if info.status == "enabled":
        return f"enabled ({info.enabled_by})" if info.enabled_by else "enabled"
    return info.status
