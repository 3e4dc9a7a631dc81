"""``doctor``: check the queue's database for what makes PostgreSQL queues degrade.

Exit codes as everywhere: 0 no check failed (with --strict: none warned either), 1 a check
failed, 2 bad usage.
"""

from __future__ import annotations

import sys
from datetime import timedelta

import click
from rich.markup import escape
from rich.table import Table

from ..ops.doctor import Doctor, DoctorConfig, Report, Verdict
from ..types import DEFAULT_LEASE
from ._params import DURATION, DURATION_HELP, console, format_seconds
from .root import EXIT_PROBLEM, CliContext, main


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too.")
@click.option("--queue", "queue_name", default="default", show_default=True, help="Queue whose claim is planned.")
@click.option("--lease", type=DURATION, default=format_seconds(DEFAULT_LEASE), show_default=True,
              help="The workers' lease: a running job whose holder's lease ended more than this ago is "
                   f"stuck (one claimed before sqlaq_0008: claimed over two leases ago). {DURATION_HELP}")
@click.option("--max-transaction-age", type=DURATION, default="5m", show_default=True,
              help=f"Transactions and snapshots older than this fail. {DURATION_HELP}")
@click.option("--horizon-warning", type=DURATION, default="60s", show_default=True,
              help=f"A snapshot of this database holding the vacuum horizon longer than this warns. {DURATION_HELP}")
@click.option("--horizon-jobs", type=click.IntRange(min=0), default=10_000, show_default=True,
              help="A snapshot of this database holding the vacuum horizon while this many jobs finished "
                   "warns, however young it is (0: never).")
@click.option("--max-lock-wait", type=DURATION, default="5s", show_default=True,
              help=f"Lock waits involving the queue table longer than this fail. {DURATION_HELP}")
@click.option("--max-xmin-age", type=click.IntRange(min=0), default=1_000_000, show_default=True,
              help="Replication slots or standbys holding the horizon back more transactions than this fail.")
@click.option("--dead-tuples", "dead_tuples_min", type=click.IntRange(min=0), default=10_000, show_default=True,
              help="Dead tuples fail above this and above 20% of the live ones.")
@click.option("--max-failed", type=click.IntRange(min=0),
              help="More failed jobs than this in the last hour fail (default: they only warn).")
@click.option("--max-latency", type=DURATION, default="5m", show_default=True,
              help=f"A queue whose oldest eligible job has waited longer than this fails. {DURATION_HELP}")
@click.pass_obj
def doctor(obj: CliContext, as_json: bool, strict: bool, queue_name: str, lease: timedelta,
           max_transaction_age: timedelta, horizon_warning: timedelta, horizon_jobs: int, max_lock_wait: timedelta,
           max_xmin_age: int,
           dead_tuples_min: int, max_failed: int | None, max_latency: timedelta) -> None:
    """Check the queue's database for what makes PostgreSQL queues degrade; exit 1 if a check fails."""
    config = DoctorConfig(
        lease=lease, max_transaction_age=max_transaction_age, horizon_warning=horizon_warning,
        horizon_jobs=horizon_jobs, max_lock_wait=max_lock_wait,
        max_xmin_age=max_xmin_age, dead_tuples_min=dead_tuples_min, max_failed=max_failed,
        max_latency=max_latency, claim_queue=queue_name,
    )
    report = Doctor(obj.queue(), config).run()
    if as_json:
        click.echo(report.to_json())
    else:
        _print_report(report, strict)
    if report.worst(strict=strict) is Verdict.FAIL:
        sys.exit(EXIT_PROBLEM)


_STYLE = {Verdict.OK: "green", Verdict.WARN: "yellow", Verdict.FAIL: "bold red"}


def _print_report(report: Report, strict: bool) -> None:
    out = console()
    table = Table(title="sqla-queue doctor", title_justify="left", show_lines=True, width=min(out.width, 120))
    table.add_column("check", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("finding")
    for check in report.checks:
        finding = escape("\n".join([check.summary, *(f"  {line}" for line in check.details)]))
        if check.verdict is not Verdict.OK and check.hint:
            finding += f"\n[italic]hint:[/italic] {escape(check.hint)}"
        table.add_row(check.name, f"[{_STYLE[check.verdict]}]{check.verdict.value.upper()}[/]", finding)
    out.print(table)
    worst = report.worst(strict=strict)
    out.print(f"verdict: [{_STYLE[worst]}]{worst.value.upper()}[/]")
