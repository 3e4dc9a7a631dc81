"""``sqla-queue worker``: run a worker until SIGTERM/SIGINT (or until the queue is empty)."""

from __future__ import annotations

import logging
import click

from . import CliContext, main
from ._params import DURATION, DURATION_HELP, format_seconds
from ..types import DEFAULT_LEASE


@main.command()
@click.option("--queues", default="default", show_default=True, help="Comma-separated queue names.")
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True,
              help="Handler threads (most jobs held at once).")
@click.option("--batch-size", type=click.IntRange(min=1), help="Most jobs per claim (default: concurrency).")
@click.option("--lease", type=DURATION, default=format_seconds(DEFAULT_LEASE), show_default=True,
              help=f"Claim lease, renewed while a handler runs. {DURATION_HELP}")
@click.option("--poll-interval", type=DURATION, default="1s", show_default=True,
              help=f"Claim this often when no notification arrives. {DURATION_HELP}")
@click.option("--grace", type=DURATION, default="30s", show_default=True,
              help=f"After SIGTERM, how long running handlers may finish. {DURATION_HELP}")
@click.option("--no-listen", is_flag=True, help="Poll only: no LISTEN/NOTIFY wake-ups.")
@click.option("--pgbouncer", is_flag=True,
              help="Behind PgBouncer in transaction mode: no LISTEN, no server-side prepared statements.")
@click.option("--until-empty", is_flag=True, help="Exit once nothing is due and nothing is running.")
@click.pass_obj
def worker(obj: CliContext, queues, concurrency, batch_size, lease, poll_interval, grace, no_listen,
           pgbouncer, until_empty) -> None:
    """Claim and run jobs. First SIGTERM/SIGINT: finish running jobs, release the rest; second: exit now."""
    _log_worker_lifecycle()
    summary = obj.queue().worker(
        queues=tuple(q.strip() for q in queues.split(",")),
        concurrency=concurrency,
        batch_size=batch_size,
        lease=lease,
        poll_interval=poll_interval.total_seconds(),
        shutdown_grace=grace.total_seconds(),
        listen=not (no_listen or pgbouncer),
        prepared_statements=not pgbouncer,
    ).run(until_empty=until_empty)
    click.echo(
        f"claimed {summary.claimed}, completed {summary.completed}, retried {summary.retried}, "
        f"failed {summary.failed}, lost {summary.lost}, released {summary.released}"
    )


def _log_worker_lifecycle() -> None:
    """The worker's own start/stop/shutdown records go to stderr at INFO, so operators (and
    process supervisors) see when it is up; per-job records stay with the app's logging setup."""
    log = logging.getLogger("sqla_queue.worker")
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
