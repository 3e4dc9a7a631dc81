"""``recover``: return jobs whose lease expired to pending (or failed, on their last attempt)."""

from __future__ import annotations

from datetime import timedelta

import click

from ..types import DEFAULT_LEASE
from ._params import DURATION, DURATION_HELP, format_seconds
from .root import CliContext, main


@main.command()
@click.option("--lease", type=DURATION, default=format_seconds(DEFAULT_LEASE), show_default=True,
              help="Only for jobs claimed before schema revision sqlaq_0008 (no stored lease end): such a "
                   "running job whose lease started longer ago than this is expired. Every other job "
                   f"is expired when its holder's own lease ends, whatever this says. {DURATION_HELP}")
@click.option("--limit", type=int, default=100, show_default=True, help="At most this many jobs per kind.")
@click.pass_obj
def recover(obj: CliContext, lease: timedelta, limit: int) -> None:
    """Return jobs with expired leases to pending (or failed, on their last attempt)."""
    ids = obj.queue().recover_expired(lease=lease, limit=limit)
    click.echo(f"recovered {len(ids)} job(s)" + (f": {', '.join(map(str, ids))}" if ids else ""))
