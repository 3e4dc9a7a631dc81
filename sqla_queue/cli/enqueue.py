"""``enqueue``: put one job of the app's tasks on the queue from the command line."""

from __future__ import annotations

import json

import click

from ._params import DURATION_HELP, DURATION_OR_ZERO
from .root import CliContext, main


@main.command()
@click.argument("task")
@click.argument("payload", default="{}")
@click.option("--queue", help="Queue name (default: the task's).")
@click.option("--delay", type=DURATION_OR_ZERO,
              help=f"Run no earlier than this long from now (0: now). {DURATION_HELP}")
@click.option("--max-attempts", type=int, help="Attempts before the job fails for good.")
@click.option("--idempotency-key", help="Dedupe key: an active job with it is returned instead.")
@click.option("--group-key", help="The job's group (a tenant, an ordering key): the queue's per-key limits apply.")
@click.pass_obj
def enqueue(obj: CliContext, task, payload, queue, delay, max_attempts, idempotency_key, group_key) -> None:
    """Enqueue TASK with a JSON object PAYLOAD; prints the job id."""
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON ({exc.msg} at column {exc.colno})", param_hint="PAYLOAD") from None
    job_id = obj.queue().enqueue(
        task, data, queue=queue, delay=delay, max_attempts=max_attempts, idempotency_key=idempotency_key,
        group_key=group_key,
    )
    click.echo(job_id)
