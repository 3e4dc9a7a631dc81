"""``sqla-queue worker``: run a worker until SIGTERM/SIGINT (or until the queue is empty)."""

from __future__ import annotations

import gc
import logging.config
import os

import click
import psycopg  # noqa: F401 - imported with the command, before the collector resumes: see below
from click.core import ParameterSource
from sqlalchemy.dialects.postgresql import psycopg as _psycopg_dialect  # noqa: F401

from ..logformat import LOG_FORMATS, logging_config
from ..types import DEFAULT_LEASE
from ..worker import worker as _worker_module  # noqa: F401
from ._params import DURATION, DURATION_HELP, format_seconds
from .root import CliContext, main, report_error

# psycopg, SQLAlchemy's dialect for it and the worker's modules are imported with this module,
# while the command's imports still run with the cyclic garbage collector paused
# (`sqla_queue._startup`): a worker needs them whatever the application is, and imported later,
# by the application's engine and `Queue.worker`, the objects they make were walked by the
# collector again and again while they arrived (the whole ``worker --until-empty`` of ten jobs
# used 1 % more CPU, 30 pairs).

LISTEN_URL_ENV = "SQLA_QUEUE_LISTEN_URL"
PROCESSES_ENV = "SQLA_QUEUE_PROCESSES"
PREFETCH_ENV = "SQLA_QUEUE_PREFETCH"
MAX_PROCESSES = 1024
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@main.command()
@click.option("--queues", show_default="every queue the app's tasks and schedules put jobs on, logged at start",
              help="Comma-separated queue names to serve.")
@click.option("--processes", type=click.IntRange(min=1, max=MAX_PROCESSES), envvar=PROCESSES_ENV,
              default=lambda: usable_cores(), show_default="one per usable core",
              help="Worker processes, each with its own connections and --concurrency threads, under a "
                   "supervisor that restarts one that dies and passes signals on; 1 runs the worker in this "
                   f"process (default: ${PROCESSES_ENV}, else one per usable core).")
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True,
              help="Handler threads (most jobs held at once).")
@click.option("--batch-size", type=click.IntRange(min=1),
              help="Most jobs per claim (default: half of concurrency plus the prefetch, or 200 if that is more).")
@click.option("--prefetch", type=click.IntRange(min=0), envvar=PREFETCH_ENV, show_default="adaptive",
              help="Claimed jobs held beyond --concurrency, waiting for a free handler (leased, their timeout "
                   "not started), so claims overlap handlers; 0: none (default: "
                   f"${PREFETCH_ENV}, else adapted so a job waits about a second at most).")
@click.option("--prefetch-ttl", type=DURATION, default="5s", show_default=True,
              help=f"A prefetched job no handler took within this goes back to the queue. {DURATION_HELP}")
@click.option("--lease", type=DURATION, default=format_seconds(DEFAULT_LEASE), show_default=True,
              help=f"Claim lease, renewed while a handler runs. {DURATION_HELP}")
@click.option("--poll-interval", type=DURATION, default="1s", show_default=True,
              help=f"Claim this often when no notification arrives. {DURATION_HELP}")
@click.option("--grace", type=DURATION, default="30s", show_default=True,
              help=f"After SIGTERM, how long running handlers may finish. {DURATION_HELP}")
@click.option("--no-listen", is_flag=True, help="Poll only: no LISTEN/NOTIFY wake-ups.")
@click.option("--pgbouncer", is_flag=True,
              help="Behind PgBouncer in transaction mode: no server-side prepared statements, no session "
                   "settings, and no LISTEN unless --listen-url gives a direct connection.")
@click.option("--listen-url", envvar=LISTEN_URL_ENV, metavar="URL",
              help="LISTEN on this connection instead: the same database reached directly, not through "
                   f"PgBouncer; with --pgbouncer, wake-ups come back (default: ${LISTEN_URL_ENV}).")
@click.option("--until-empty", is_flag=True, help="Exit once nothing is due and nothing is running.")
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False), default="INFO",
              show_default=True, help="Least severe record written to stderr (DEBUG adds claims and enqueues).")
@click.option("--log-format", type=click.Choice(LOG_FORMATS), default="text", show_default=True,
              help="text: time, level, logger, message; json: one object per line with the job's fields.")
@click.option("--reload", is_flag=True,
              help="Development: restart the worker when a Python file under --reload-dir changes (needs "
                   "watchfiles: pip install 'sqla-queue[reload]').")
@click.option("--reload-dir", "reload_dirs", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="A directory --reload watches (repeatable; default: the current directory).")
@click.pass_obj
def worker(obj: CliContext, queues, processes, concurrency, batch_size, prefetch, prefetch_ttl, lease, poll_interval, grace, no_listen,
           pgbouncer, listen_url, until_empty, log_level, log_format, reload, reload_dirs) -> None:
    """Claim and run jobs. First SIGTERM/SIGINT: finish running jobs, release the rest; second: exit now."""
    if reload_dirs and not reload:
        raise click.UsageError("--reload-dir needs --reload")
    if reload:
        if until_empty:
            raise click.UsageError("--reload and --until-empty contradict each other: pick one")
        from .reload import run_reloading

        run_reloading(reload_dirs, grace.total_seconds())
        return
    if listen_url and no_listen:
        raise click.UsageError("--listen-url and --no-listen contradict each other: pick one")
    if processes > 1 and not hasattr(os, "fork"):
        raise click.BadParameter("more than one process needs os.fork (Linux, macOS): pass 1",
                                 param_hint="--processes")
    queue = obj.queue()  # imports the app, which may configure logging itself
    _configure_logging(log_level, log_format)
    if queues is None and not queue.core.declared_queues():
        raise click.UsageError("the app registers no task, so the worker has no queue to serve: register one "
                               "with @queue.task, or name the queues with --queues")
    options = dict(
        queues=None if queues is None else tuple(q.strip() for q in queues.split(",")),
        concurrency=concurrency,
        batch_size=batch_size,
        prefetch=prefetch,
        prefetch_ttl=prefetch_ttl.total_seconds(),
        lease=lease,
        poll_interval=poll_interval.total_seconds(),
        shutdown_grace=grace.total_seconds(),
        listen=not no_listen and (not pgbouncer or bool(listen_url)),
        listen_engine=listen_url or None,
        prepared_statements=not pgbouncer,
    )
    if processes == 1:
        worker = queue.worker(**options)
        _settle_collector()
        summary = worker.run(until_empty=until_empty)
    else:
        summary = _supervised(queue, options, processes, until_empty)
    click.echo(
        f"claimed {summary.claimed}, completed {summary.completed}, retried {summary.retried}, "
        f"failed {summary.failed}, lost {summary.lost}, released {summary.released}"
    )


YOUNG_GENERATION_THRESHOLD = 10_000
"""`gc.set_threshold`'s first value in a worker process the command starts (Python's is 700)."""


def _settle_collector() -> None:
    """The app, SQLAlchemy and the worker are built, and what the process made so far lives as
    long as it does: out of the cyclic garbage collector's sight (`gc.freeze`), its full passes
    no longer walk it again and again while the worker runs (they took a tenth of a no-op
    drain's CPU), nor touch the pages a forked worker process shares with the supervisor.

    Then the youngest generation is collected every `YOUNG_GENERATION_THRESHOLD` allocations
    instead of every 700: a worker holds a batch of jobs (hundreds, with prefetch) of a few
    objects each, and at 700 the collections walked and promoted them over and over, a third
    of a 1 x 200 no-op drain's worker CPU. An app that set a higher threshold, or turned the
    collector off, keeps its choice. The CLI owns its process; a worker run from application
    code leaves the host's collector alone."""
    gc.freeze()
    young, middle, old = gc.get_threshold()
    if gc.isenabled() and 0 < young < YOUNG_GENERATION_THRESHOLD:
        gc.set_threshold(YOUNG_GENERATION_THRESHOLD, middle, old)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which ``taskset`` and container
    cpusets narrow), else every core the machine has. A CPU quota (``docker --cpus``) is not
    an affinity: pass --processes there."""
    try:
        return max(1, min(len(os.sched_getaffinity(0)), MAX_PROCESSES))
    except AttributeError:  # macOS: no affinity; Windows: no fork either, so one process
        return max(1, min(os.cpu_count() or 1, MAX_PROCESSES)) if hasattr(os, "fork") else 1


def _supervised(queue, options: dict, processes: int, until_empty: bool):
    """N worker processes under `sqla_queue.worker.supervisor`. A worker is built here first, so a bad
    option is reported once rather than by every process; it opens no connection."""
    from ..worker.supervisor import supervise

    queue.worker(**options).engine.dispose()
    _settle_collector()  # before the fork: each worker process inherits it

    def make_worker():
        queue.engine.dispose(close=False)  # the parent's pooled connections, if its import made any
        return queue.worker(**options)

    result = supervise(make_worker, processes, until_empty=until_empty, report_error=report_error)
    if result.exit_code > 128:
        raise SystemExit(result.exit_code)
    if result.problem is not None:
        raise click.ClickException(result.problem)
    return result.summary


def _configure_logging(level: str, log_format: str) -> None:
    """Give every record (the worker's, the per-job ones, the handlers' own) a handler with a
    time and a level. An app that set up logging when imported keeps its setup, unless
    --log-level or --log-format was given on the command line."""
    ctx = click.get_current_context()
    asked = any(ctx.get_parameter_source(name) is not ParameterSource.DEFAULT
                for name in ("log_level", "log_format"))
    if asked or not logging.getLogger().handlers:
        logging.config.dictConfig(logging_config(level, log_format))
