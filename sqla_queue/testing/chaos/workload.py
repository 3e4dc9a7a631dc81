"""The workload's app, as ``sqla-queue --app sqla_queue.testing.chaos.workload:queue worker``
runs it: four tasks, an effects table, and an observer plugin writing the run's trace.

The queue is built on first access from environment variables the runner sets,
``SQLA_QUEUE_CHAOS_DATABASE_URL`` and ``SQLA_QUEUE_CHAOS_EVENTS`` (the trace file), so importing
this module costs nothing and needs neither. With ``SQLA_QUEUE_CHAOS_APP`` set (``--app``), it is
that app's queue instead, rebound to the run's database, with the same observer (`app`).

Effects: ``chaos_transaction`` inserts one ``chaos_effects`` row inside ``ctx.transaction()``,
which commits with the job's completion or not at all. The table has no unique constraint on
the job on purpose: a second committed effect of one job must be counted by the checker, not
refused by the database (a refusal would turn the violation into a retried error and hide it).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from sqlalchemy import BigInteger, Column, Engine, Integer, MetaData, Table, Text, insert

import sqla_queue as sq

from . import app, events

DATABASE_URL_ENV = "SQLA_QUEUE_CHAOS_DATABASE_URL"
EVENTS_ENV = "SQLA_QUEUE_CHAOS_EVENTS"
RETRY_DELAY = 0.2  # seconds: failing jobs come back quickly, so the run heals in seconds
MAX_SNOOZES = 50  # a stale claim's snooze must be refused, not counted: far above a plan's few

effects_metadata = MetaData()
effects = Table(
    "chaos_effects", effects_metadata,
    Column("id", BigInteger, primary_key=True),
    Column("job_id", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("claim_token", Text, nullable=False),
)


class ChaosFailure(Exception):
    """What a failing job raises on its planned failed attempts."""


class TraceObserver:
    """The lifecycle hooks, written to the trace: what the worker believes happened."""

    def __init__(self, path: str) -> None:
        self.path = path

    @sq.hookimpl
    def sqla_queue_job_claimed(self, event) -> None:
        events.append(self.path, "claimed", job=event.job_id, attempt=event.attempt, worker=event.worker_id)

    @sq.hookimpl
    def sqla_queue_job_completed(self, event) -> None:
        events.append(self.path, "completed", job=event.job_id, attempt=event.attempt)

    @sq.hookimpl
    def sqla_queue_job_retried(self, event) -> None:
        events.append(self.path, "retried", job=event.job_id, attempt=event.attempt)

    @sq.hookimpl
    def sqla_queue_job_failed(self, event) -> None:
        events.append(self.path, "failed", job=event.job_id, attempt=event.attempt)

    @sq.hookimpl
    def sqla_queue_job_recovered(self, event) -> None:
        events.append(self.path, "recovered", job=event.job_id, status=str(event.status.value))

    @sq.hookimpl
    def sqla_queue_lost_claim(self, event) -> None:
        events.append(self.path, "lost_claim", job=event.job_id, reason=event.reason, operation=event.operation)


def build_queue(database: str | Engine, events_path: str) -> sq.Queue:
    """The workload's queue on `database` (a URL or an Engine), tracing to `events_path`."""
    queue = sq.Queue(database, plugins=[TraceObserver(events_path)], load_entrypoints=False)

    def ran(ctx: sq.JobContext, what: str, **more: Any) -> None:
        events.append(events_path, what, job=ctx.job_id, attempt=ctx.attempt, **more)

    @queue.task(name="chaos_plain", retry_delay=RETRY_DELAY)
    def plain(payload: dict[str, Any], ctx: sq.JobContext) -> None:
        ran(ctx, "handler_started")
        time.sleep(payload.get("sleep", 0))
        ran(ctx, "handler_returned")

    @queue.task(name="chaos_failing", retry_delay=RETRY_DELAY)
    def failing(payload: dict[str, Any], ctx: sq.JobContext) -> None:
        ran(ctx, "handler_started")
        if ctx.attempt <= payload["fail_attempts"]:
            raise ChaosFailure(f"planned failure {ctx.attempt} of {payload['fail_attempts']}")
        ran(ctx, "handler_returned")

    @queue.task(name="chaos_snoozing", retry_delay=RETRY_DELAY, max_snoozes=MAX_SNOOZES)
    def snoozing(payload: dict[str, Any], ctx: sq.JobContext) -> None:
        """Snoozes `snoozes` times (the row counts them: a snooze gives the attempt back), each
        for `snooze` seconds, then returns: the clock decides when it runs next, not a claim."""
        ran(ctx, "handler_started")
        if queue.get_job(ctx.job_id).snoozes < payload["snoozes"]:
            raise sq.Snooze(payload["snooze"])
        ran(ctx, "handler_returned")

    @queue.task(name="chaos_transaction", retry_delay=RETRY_DELAY)
    def transaction(payload: dict[str, Any], ctx: sq.JobContext) -> None:
        ran(ctx, "handler_started")
        with ctx.transaction() as session:
            session.execute(insert(effects).values(job_id=ctx.job_id, attempt=ctx.attempt, claim_token=ctx.claim_token))
            if ctx.attempt == 1 and payload.get("pause"):
                pause_this_process(ctx, payload["pause"])
            else:
                time.sleep(payload.get("sleep", 0))
        ran(ctx, "handler_committed")

    def pause_this_process(ctx: sq.JobContext, seconds: float) -> None:
        """SIGSTOP of this worker process from inside the handler's transaction, so that the
        commit is the first thing it does when the runner resumes it: this thread holds the GIL
        when the process stops, so it runs before the worker's heartbeat can notice the loss."""
        ran(ctx, "self_pause", seconds=seconds)
        os.kill(os.getpid(), signal.SIGSTOP)

    return queue


TASKS = {"plain": "chaos_plain", "idempotent": "chaos_plain", "long": "chaos_plain", "scheduled": "chaos_plain",
         "failing": "chaos_failing", "transaction": "chaos_transaction", "pausing": "chaos_transaction",
         "snoozing": "chaos_snoozing"}


def run_queue(database_url: str, events_path: str) -> sq.Queue:
    """The queue a worker or enqueuer process runs: the --app's, else the built-in workload's."""
    spec = os.environ.get(app.APP_ENV)
    if spec:
        return app.bound_queue(app.load(spec), database_url, TraceObserver(events_path))
    return build_queue(database_url, events_path)


def __getattr__(name: str) -> Any:
    if name != "queue":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    queue = run_queue(os.environ[DATABASE_URL_ENV], os.environ[EVENTS_ENV])
    globals()["queue"] = queue
    return queue
