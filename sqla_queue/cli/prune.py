"""``prune``: delete old finished jobs and counter rows in batches; pending and running jobs stay."""

from __future__ import annotations

import click

from ..services.pruning import DEFAULT_BATCH_SIZE, DEFAULT_COUNTERS_AFTER
from ._params import DURATION, DURATION_HELP
from .root import CliContext, main


@main.command()
@click.option("--completed-older-than", type=DURATION, help=f"Delete completed jobs older than this. {DURATION_HELP}")
@click.option("--failed-older-than", type=DURATION, help=f"Delete failed jobs older than this. {DURATION_HELP}")
@click.option("--cancelled-older-than", type=DURATION,
              help=f"Delete cancelled jobs older than this. {DURATION_HELP}")
@click.option("--counters-older-than", type=DURATION, default=f"{DEFAULT_COUNTERS_AFTER.days}d", show_default=True,
              help=f"Delete event counters older than this. {DURATION_HELP}")
@click.option("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, show_default=True,
              help="Rows per DELETE, each in a transaction of its own.")
@click.pass_obj
def prune(obj: CliContext, completed_older_than, failed_older_than, cancelled_older_than, counters_older_than,
          batch_size) -> None:
    """Delete old finished jobs in batches until none is left; pending and running jobs stay."""
    if completed_older_than is None and failed_older_than is None and cancelled_older_than is None:
        raise click.UsageError("give --completed-older-than, --failed-older-than or --cancelled-older-than "
                               "(any of them)")
    result = obj.queue().prune(completed_after=completed_older_than, failed_after=failed_older_than,
                               cancelled_after=cancelled_older_than, counters_after=counters_older_than,
                               batch_size=batch_size)
    click.echo(f"pruned {result.completed} completed, {result.failed} failed and {result.cancelled} cancelled "
               f"job(s) and {result.counters} counter row(s) in {result.batches} batch(es)")
