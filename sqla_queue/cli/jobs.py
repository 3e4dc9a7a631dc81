"""``jobs list / show / retry / cancel``: find jobs and act on one of them, or (retry, cancel)
on every job a filter matches, through the same `Queue` methods as the dashboard.

Exit codes as everywhere: 0 done, 1 the command ran and found a problem (no such job, a job in
the wrong state or busy), 2 bad usage or input. Payloads are printed bounded (`payload_text`):
one job may carry megabytes.
"""

from __future__ import annotations

import json

import click
from rich.table import Table

from ..errors import JobStateError
from ..reports import BulkResult, JobPage, JobView
from ..types import JobStatus
from ._params import console, payload_fields, payload_text, timestamp
from .root import EXIT_PROBLEM, CliContext, main


class Refused(click.ClickException):
    """The job is not in a state the action applies to, or busy: exit 1, nothing changed."""

    exit_code = EXIT_PROBLEM


@main.group()
def jobs() -> None:
    """List jobs, show one, retry failed jobs now, cancel jobs (one, or every job a filter matches)."""


@jobs.command("list")
@click.option("--status", type=click.Choice([s.value for s in JobStatus]), help="Only jobs in this state.")
@click.option("--waiting", is_flag=True, help="Only jobs waiting for their dependencies (--status waiting).")
@click.option("--queue", "queue_name", help="Only jobs of this queue.")
@click.option("--task", help="Only jobs of this task.")
@click.option("--limit", type=int, default=20, show_default=True, help="Jobs per page (at most 1000).")
@click.option("--before", "before_id", type=int, metavar="ID", help="The page after the one that ended at ID.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def list_(obj: CliContext, status, waiting, queue_name, task, limit, before_id, as_json) -> None:
    """Jobs newest first; the last line says how to get the next page."""
    if waiting and status not in (None, JobStatus.WAITING.value):
        raise click.UsageError(f"--waiting lists waiting jobs; it cannot be combined with --status {status}")
    status = JobStatus.WAITING.value if waiting else status
    page = obj.queue().list_jobs(status=status, queue=queue_name, task=task, limit=limit, before_id=before_id)
    if as_json:
        click.echo(json.dumps({"jobs": [job_dict(j) for j in page.jobs], "next_before": page.next_before},
                              indent=2, ensure_ascii=False))
        return
    console().print(_jobs_table(page))
    click.echo(f"next page: --before {page.next_before}" if page.next_before else "last page")


def _jobs_table(page: JobPage) -> Table:
    table = Table(title_justify="left")
    for column in ("id", "status", "queue", "task", "priority", "attempts", "run at / finished", "last error"):
        table.add_column(column, no_wrap=column != "last error",
                         justify="right" if column in ("id", "priority") else "left")
    for job in page.jobs:
        when = job.completed_at or job.failed_at or job.cancelled_at or job.run_at
        status = "running, cancel requested" if job.cancel_requested_at and job.status is JobStatus.RUNNING \
            else job.status.value
        table.add_row(str(job.id), status, job.queue, job.task, str(job.priority),
                      f"{job.attempts}/{job.max_attempts}", timestamp(when), job.last_error or "")
    return table


def job_dict(job: JobView, *, full_payload: bool = False) -> dict:
    """A job for ``--json``: times in ISO 8601, the payload bounded (see `payload_fields`)."""
    values = vars(job).copy()
    values["status"] = job.status.value
    for key, value in values.items():
        if hasattr(value, "isoformat"):
            values[key] = value.isoformat()
    values.update(payload_fields(job.payload, full=full_payload))
    return values


@jobs.command()
@click.argument("job_id", type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option("--full-payload", is_flag=True, help="With --json: the whole payload, however large.")
@click.pass_obj
def show(obj: CliContext, job_id: int, as_json: bool, full_payload: bool) -> None:
    """Everything about job JOB_ID: state, times, last error and where it was raised, payload, and
    the jobs it depends on and that depend on it."""
    if full_payload and not as_json:
        raise click.UsageError("--full-payload needs --json")
    job = obj.queue().get_job(job_id)
    if job is None:
        raise Refused(f"no job with id {job_id}")
    graph = obj.queue().dependencies(job_id)
    if as_json:
        shown = {**job_dict(job, full_payload=full_payload), **graph}
        click.echo(json.dumps(shown, indent=2, ensure_ascii=False))
        return
    click.echo(_job_text(job))
    for title, key in (("depends on:", "depends_on"), ("dependents:", "dependents")):
        if graph[key]:
            click.echo(title)
            for edge in graph[key]:
                anyway = " (runs even if it fails)" if key == "depends_on" and edge["run_anyway"] else ""
                click.echo(f"  job {edge['id']} {edge['task'] or '-'} {edge['status'] or 'pruned'}{anyway}")


def _job_text(job: JobView) -> str:
    rows = {
        "status": job.status.value, "queue": job.queue, "task": job.task, "priority": job.priority,
        "attempts": f"{job.attempts}/{job.max_attempts}", "snoozes": job.snoozes,
        "created": timestamp(job.created_at), "run at": timestamp(job.run_at),
        "scheduled at": timestamp(job.scheduled_at), "locked at": timestamp(job.locked_at),
        "locked by": job.locked_by or "-", "completed at": timestamp(job.completed_at),
        "failed at": timestamp(job.failed_at), "cancel request": timestamp(job.cancel_requested_at),
        "cancelled at": timestamp(job.cancelled_at), "idempotency key": job.idempotency_key or "-",
        "last error": job.last_error or "-",
    }
    lines = [f"job {job.id}", *(f"  {name + ':':<17}{value}" for name, value in rows.items())]
    if job.last_traceback:
        lines += ["traceback:", *(f"  {line}" for line in job.last_traceback.splitlines())]
    lines += ["payload:", payload_text(job.payload)]
    if job.result is not None:
        lines += ["result:", payload_text(job.result)]
    return "\n".join(lines)


def _bulk_options(*, statuses: tuple[str, ...] = ()):
    """The options that turn `retry` / `cancel` into a bulk action on every job they match."""

    def decorate(command):
        options = [
            click.option("--queue", "queue_name", help="Every matching job of this queue."),
            click.option("--task", help="Every matching job of this task."),
            click.option("--limit", type=click.IntRange(min=1), default=1000, show_default=True,
                         help="The most jobs changed (lowest ids first); the rest are counted as skipped."),
        ]
        if statuses:
            options.append(click.option("--status", type=click.Choice(statuses),
                                        help="Only jobs in this state (default: pending and running)."))
        else:
            options.append(click.option("--all", "all_", is_flag=True,
                                        help="Every failed job (up to --limit), when no other filter is given."))
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def _single_or_bulk(job_ids: tuple[int, ...], filters: dict) -> int | None:
    """The one job id of a single action, or None for a bulk action; a mix is a usage error."""
    given = {name: value for name, value in filters.items() if value not in (None, False)}
    if len(job_ids) == 1 and not given:
        return job_ids[0]
    if not job_ids and not given:
        raise click.UsageError("give a JOB_ID, several, or a filter (--queue, --task, " +
                               ("--status" if "status" in filters else "--all") + ")")
    return None


def _bulk_report(result: BulkResult, done: str) -> None:
    """What a bulk action changed (`done` says it of N jobs), and what it left alone."""
    ended = [job_id for job_id in result.changed if job_id not in result.cancel_requested]
    click.echo(done.format(n=len(ended)) + (f": {_id_list(ended)}" if ended else ""))
    if result.cancel_requested:
        click.echo(f"cancel requested for {len(result.cancel_requested)} running job(s): "
                   f"{_id_list(result.cancel_requested)}")
    if result.skipped:
        click.echo(f"skipped {result.skipped} matching job(s): held by another transaction right now, "
                   "beyond --limit, or (retry) holding an idempotency key an active job holds")


def _id_list(ids, shown: int = 20) -> str:
    ids = list(ids)
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(str(job_id) for job_id in ids[:shown]) + more


@jobs.command()
@click.argument("job_ids", metavar="[JOB_ID]...", nargs=-1, type=int)
@_bulk_options()
@click.pass_obj
def retry(obj: CliContext, job_ids: tuple[int, ...], queue_name, task, limit, all_) -> None:
    """Make failed job JOB_ID pending and due now, with at least one attempt left; with several
    ids or a filter (--queue, --task, --all), every failed job they match."""
    job_id = _single_or_bulk(job_ids, {"queue": queue_name, "task": task, "all": all_})
    if job_id is None:
        result = obj.queue().retry_jobs(queue_name=queue_name, task=task, job_ids=job_ids or None, limit=limit)
        _bulk_report(result, "retried {n} failed job(s), pending again and due now")
        return
    try:
        job = obj.queue().retry_now(job_id)
    except JobStateError as exc:
        raise Refused(str(exc)) from None
    click.echo(f"job {job.id} ({job.task} on {job.queue}) is pending again, due now: "
               f"attempt {job.attempts + 1} of {job.max_attempts}")


@jobs.command()
@click.argument("job_ids", metavar="[JOB_ID]...", nargs=-1, type=int)
@_bulk_options(statuses=("pending", "running"))
@click.pass_obj
def cancel(obj: CliContext, job_ids: tuple[int, ...], queue_name, task, limit, status) -> None:
    """Cancel pending job JOB_ID, or ask the worker running it to stop; prints which. With
    several ids or a filter (--queue, --task, --status), every active job they match."""
    job_id = _single_or_bulk(job_ids, {"queue": queue_name, "task": task, "status": status})
    if job_id is None:
        result = obj.queue().cancel_jobs(status=status, queue_name=queue_name, task=task,
                                         job_ids=job_ids or None, limit=limit)
        _bulk_report(result, "cancelled {n} pending job(s)")
        return
    try:
        job = obj.queue().cancel(job_id)
    except JobStateError as exc:
        raise Refused(str(exc)) from None
    what = f"{job.task} on {job.queue}, created {timestamp(job.created_at)}, attempts {job.attempts}/{job.max_attempts}"
    if job.status is JobStatus.RUNNING:
        click.echo(f"cancel requested for running job {job.id} ({what}, held by {job.locked_by}): it ends "
                   f"cancelled when its handler returns or raises")
        return
    click.echo(f"cancelled job {job.id} ({what}); payload: {payload_text(job.payload, indent=None)}")
