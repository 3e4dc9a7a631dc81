"""``workers``: the worker registry, one row per worker process, live ones first.

Each worker writes its own row (at start, on every lease beat, deleted on a clean exit), so
this lists workers that are idle as well as busy, with the queues they serve rather than the
queues they happened to finish jobs from. A worker that stopped beating without a clean exit is
shown ``dead`` until the next worker to start sweeps it, a day later.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import click
from rich.markup import escape
from rich.table import Table

from ..ops.formatting import format_duration
from ..reports import WorkerInfo
from ._params import console, timestamp
from .root import CliContext, main

_STYLE = {"running": "green", "stopping": "yellow", "dead": "bold red"}


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--live", "live_only", is_flag=True, help="Leave out dead workers.")
@click.pass_obj
def workers(obj: CliContext, as_json: bool, live_only: bool) -> None:
    """Worker processes and the queues they serve.

    From the worker registry: host, pid, version, status (running, stopping, or dead: no
    heartbeat within its lease), queues served, tasks registered, running jobs, last heartbeat.
    Live workers first."""
    found = obj.queue().workers(include_dead=not live_only)
    if as_json:
        click.echo(json.dumps([worker_dict(w) for w in found], indent=2, ensure_ascii=False))
        return
    console().print(workers_table(found))


def worker_dict(worker: WorkerInfo) -> dict:
    """Every field, the state as ``status`` (``dead`` for a worker that stopped beating), times
    in ISO 8601."""

    def iso(value: datetime | None) -> str | None:
        return value.isoformat() if value is not None else None

    return {
        "id": worker.worker_id, "host": worker.host, "pid": worker.pid, "version": worker.version,
        "status": worker.status, "alive": worker.alive, "queues": list(worker.queues), "tasks": list(worker.tasks),
        "concurrency": worker.concurrency, "running_job_ids": list(worker.running_job_ids),
        "started_at": iso(worker.started_at), "heartbeat_at": iso(worker.heartbeat_at),
        "expires_at": iso(worker.expires_at),
    }


def workers_table(found: list[WorkerInfo]) -> Table:
    table = Table(title="workers", title_justify="left")
    for column in ("worker", "host", "pid", "version", "status", "queues", "tasks", "concurrency", "running",
                   "started", "last heartbeat"):
        table.add_column(column, justify="right" if column in ("pid", "concurrency", "running") else "left",
                         no_wrap=column in ("worker", "status", "started"))
    for w in found:
        status = w.status
        table.add_row(escape(w.worker_id), escape(w.host), str(w.pid), escape(w.version),
                      f"[{_STYLE.get(status, '')}]{status}[/]", escape(", ".join(w.queues)), escape(", ".join(w.tasks)),
                      str(w.concurrency), str(len(w.running_job_ids)), timestamp(w.started_at),
                      _ago(w, w.heartbeat_at))
    if not found:
        table.caption = "no worker registered: none is running (or none reached this database)"
    return table


def _ago(worker: WorkerInfo, when: datetime) -> str:
    if worker.measured_at is None:
        return timestamp(when)
    return f"{format_duration(max(worker.measured_at - when, timedelta(0)))} ago"
