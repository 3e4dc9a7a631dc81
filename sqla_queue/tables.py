"""The queue's tables in SQLAlchemy Core: the default job table, ``sqla_queue_jobs`` on our
`metadata`, and the companions every job table has.

Core, not the ORM: a worker, a script enqueueing on a URL and the command line never map a
class, and importing ``sqlalchemy.orm`` alone took a sixth of a worker's start-up. The ORM side
(`sqla_queue.models`: `JobMixin` for a host's own job table, `Job` mapped onto `jobs`) is built
from the same definitions below and imported only by whoever uses it. The packaged Alembic
revisions create exactly this schema (a test compares them).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    Identity,
    Index,
    Integer,
    Interval,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    false,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from .errors import ConfigurationError
from .states import FINISHED, active_key_predicate_sql, check_constraint_sql

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)
"""The library's MetaData: add it to a host's Alembic ``target_metadata`` list."""

DEFAULT_JOB_TABLE = "sqla_queue_jobs"

_TIMESTAMP = DateTime(timezone=True)


def job_columns() -> dict[str, tuple[tuple[Any, ...], dict[str, Any]]]:
    """Each job column's ``Column`` arguments after its name (type and the like, then keyword
    options), in table order; new identity and default objects on every call, since a column
    owns them. `job_table` and `models.JobMixin` are both built from this."""
    return {
        "id": ((BigInteger, Identity(always=True)), {"primary_key": True}),
        "queue_name": ((Text,), {"nullable": False}),
        "task": ((Text,), {"nullable": False}),
        "payload": ((JSONB,), {"nullable": False}),
        "status": ((Text,), {"nullable": False, "server_default": text("'pending'")}),
        "run_at": ((_TIMESTAMP,), {"nullable": False, "server_default": func.now()}),
        "attempts": ((Integer,), {"nullable": False, "server_default": text("0")}),
        "max_attempts": ((Integer,), {"nullable": False, "server_default": text("5")}),
        "locked_at": ((_TIMESTAMP,), {}),
        "locked_by": ((Text,), {}),
        # When the holder's lease runs out (revision sqlaq_0008): the claim sets it to the
        # claiming worker's own lease from the database clock, every renewal moves it, and
        # recovery takes a running job back only once it has passed, whatever lease the
        # recovering process runs with. Cleared with locked_at. NULL on a running row claimed
        # before the revision: recovery then falls back to ``locked_at`` and the lease it is given.
        "lease_expires_at": ((_TIMESTAMP,), {}),
        # The token of the latest claim. It stays on the row after complete/retry/fail so that a
        # replayed outcome (the reply was lost, the caller tries again) is recognised as ours;
        # recovery clears it, which turns every late outcome of the expired claim into a lost claim.
        "claim_token": ((Text,), {}),
        "completed_at": ((_TIMESTAMP,), {}),
        # When the job became terminally failed (revision sqlaq_0002): retention and the
        # recent-failures window read it; retries that leave the job pending do not set it.
        "failed_at": ((_TIMESTAMP,), {}),
        "last_error": ((Text,), {}),
        # Where the attempt that set last_error raised (revision sqlaq_0004): frames and the
        # one-line error, bounded and sanitized (sqla_queue._sanitize.traceback_text). It lives
        # and is cleared with last_error; NULL when the error was recorded as a string.
        "last_traceback": ((Text,), {}),
        "idempotency_key": ((Text,), {}),
        # Revision sqlaq_0005 (scheduling and job control). Higher priority is claimed first.
        "priority": ((SmallInteger,), {"nullable": False, "server_default": text("0")}),
        # How often the job snoozed: a snooze gives its attempt back, so this bounds it instead.
        "snoozes": ((Integer,), {"nullable": False, "server_default": text("0")}),
        # The schedule tick a periodic job was enqueued for (the schedule's row enforces one job
        # per tick); NULL for every other job.
        "scheduled_at": ((_TIMESTAMP,), {}),
        # Someone asked to cancel this running job: its worker sees it at lease renewal, and any
        # outcome recorded after it ends the job cancelled.
        "cancel_requested_at": ((_TIMESTAMP,), {}),
        "cancelled_at": ((_TIMESTAMP,), {}),
        # The handler's return value, stored with the completion in the same statement.
        "result": ((JSONB,), {}),
        # A `Queue.wait` call watches this job: the statement that finishes it sends a
        # notification. Only watched jobs do, because every NOTIFY wakes every listening session
        # of the database.
        "watched": ((Boolean,), {"nullable": False, "server_default": false()}),
        # What enqueue stored with the job for its handler (revision sqlaq_0007): ``meta=`` and
        # the `sqla_queue_job_meta` hooks' keys (a trace context), read as ``ctx.meta``. NULL: none.
        "meta": ((JSONB,), {}),
        # The job's group (revision sqlaq_0011): a tenant, a customer, an ordering key. The
        # queue's limits (`limits_table`) cap running jobs and starts per key and share claims
        # between keys; NULL: no group, and no per-key limit applies.
        "group_key": ((Text,), {}),
        # Workflows (revision sqlaq_0012). ``waiting_on``: how many of a waiting job's
        # dependencies have not finished yet; the statement that finishes one subtracts it
        # under the row lock, and the job turns pending at zero. ``dependents``: how many jobs
        # were enqueued depending on this one; a finishing statement reads the dependencies
        # table only for rows where it is above zero, so a job nobody depends on finishes at no
        # extra cost (`sql.dependencies`).
        "waiting_on": ((Integer,), {"nullable": False, "server_default": text("0")}),
        "dependents": ((Integer,), {"nullable": False, "server_default": text("0")}),
        # The job's turn in a fair queue (revision sqlaq_0013): the round in which its key is
        # served, set by the enqueue when the queue is fair (`sql.enqueue`). A fair claim takes
        # the jobs of the lowest due turns; NULL: enqueued while the queue was not fair.
        "fair_tag": ((BigInteger,), {}),
        # The row lives in the history (revision sqlaq_0014). Always false in a plain job table;
        # in one converted to the partitioned layout (`sqla_queue.ops.storage`) it is the
        # partition key: the archiver moves finished jobs to true, out of the claim's table, and
        # a statement that makes a finished job active again sets it back to false.
        "archived": ((Boolean,), {"nullable": False, "server_default": false()}),
        "created_at": ((_TIMESTAMP,), {"nullable": False, "server_default": func.now()}),
    }


def job_table_args(name: str) -> tuple[Any, ...]:
    """The CHECK constraints and indexes of the job table called `name`: index and constraint
    names derive from it, so two job tables in one database do not collide."""
    return (
        CheckConstraint(check_constraint_sql(), name="status"),
        CheckConstraint("attempts >= 0", name="attempts"),
        CheckConstraint("max_attempts > 0", name="max_attempts"),
        CheckConstraint("snoozes >= 0", name="snoozes"),
        CheckConstraint("waiting_on >= 0", name="waiting_on"),
        CheckConstraint("dependents >= 0", name="dependents"),
        # The claim's predicate repeats this literal (never a parameter) so the planner can
        # prove the partial index applies; key order = the claim's ORDER BY (equality,
        # priority high to low, due time, tie-breaker), so LIMIT stops after n entries.
        Index(
            f"{name}_pending_claim_idx",
            "queue_name",
            text("priority DESC"),
            "run_at",
            "id",
            postgresql_where="status = 'pending'",
        ),
        # The dedupe window: one active job per key. Completed and failed jobs release it.
        # Only rows with a key enter it (revision sqlaq_0015): a job without one, most jobs,
        # costs no entry when it is enqueued, claimed or has its lease renewed.
        Index(
            f"{name}_active_key_idx",
            "idempotency_key",
            unique=True,
            postgresql_where=active_key_predicate_sql(),
        ),
        # The jobs waiting for their dependencies, which no other index holds: with the pending
        # and running indexes, the active-jobs aggregate reads every active row (`sql.stats`).
        Index(
            f"{name}_waiting_idx",
            "queue_name",
            postgresql_where="status = 'waiting'",
        ),
        # Lease recovery scans running jobs by the end of their holder's lease, and rows
        # claimed before revision sqlaq_0008 (no lease end) by its start: those alone, so a
        # claim adds one entry to one running-jobs index.
        Index(
            f"{name}_running_expiry_idx",
            "lease_expires_at",
            "id",
            postgresql_where="status = 'running'",
        ),
        Index(
            f"{name}_running_unleased_idx",
            "locked_at",
            "id",
            postgresql_where="status = 'running' AND lease_expires_at IS NULL",
        ),
        # Retention (delete finished jobs older than N) and recent-window stats scan finished
        # jobs by the time they finished, one index per terminal state (`states.FINISHED`);
        # the pending/running rows never enter these indexes.
        # A limited claim (sql/claim/limited.py) walks the distinct keys of a queue's pending
        # jobs (a loose index scan) and each key's jobs in claim order; it counts running jobs
        # per key. Only grouped rows enter either index, so jobs without a key (every job of a
        # queue that never uses keys) cost nothing more to enqueue or claim.
        Index(
            f"{name}_pending_group_idx",
            "queue_name",
            "group_key",
            text("priority DESC"),
            "run_at",
            "id",
            postgresql_where="status = 'pending' AND group_key IS NOT NULL",
        ),
        Index(
            f"{name}_running_group_idx",
            "queue_name",
            "group_key",
            postgresql_where="status = 'running' AND group_key IS NOT NULL",
        ),
        # A fair queue's claim reads its pending jobs in turn order (`sql.claim.fair`), and
        # its enqueue reads the lowest turn of the queue and the highest of the job's key. Only
        # rows with a turn enter these, so queues that are not fair cost nothing more.
        Index(
            f"{name}_pending_fair_idx",
            "queue_name",
            "fair_tag",
            text("priority DESC"),
            "run_at",
            "id",
            postgresql_where="status = 'pending' AND fair_tag IS NOT NULL",
        ),
        Index(
            f"{name}_pending_key_turn_idx",
            "queue_name",
            "group_key",
            "fair_tag",
            postgresql_where="status = 'pending' AND fair_tag IS NOT NULL",
        ),
        *(Index(f"{name}_{state.finished_at}_idx", state.finished_at,
                postgresql_where=f"status = '{state.value}'") for state in FINISHED),
    )


def job_table(name: str, on: MetaData, *, schema: str | None = None) -> Table:
    """A job table called `name` on `on`, with its companions (`companion_tables`)."""
    table = Table(name, on, *(Column(column, *args, **options) for column, (args, options) in job_columns().items()),
                  *job_table_args(name), schema=schema)
    companion_tables(table)
    return table


def job_table_of(model: Any) -> Table:
    """The job table of `model`, a mapped class built on `JobMixin` (a `ConfigurationError` if
    not); None means the default table, `jobs`."""
    if model is None:
        return jobs
    table = getattr(model, "__table__", None)
    if not isinstance(table, Table) or "claim_token" not in table.c:
        raise ConfigurationError(f"model must be a mapped class built on sqla_queue.JobMixin, got {model!r}")
    return table


def companion_tables(job_table: Table) -> tuple[Table, ...]:
    """The tables that live beside a job table: counters, queues, schedules, samples, workers,
    limits, group rates and dependencies."""
    return (counters_table(job_table), queues_table(job_table), schedules_table(job_table),
            samples_table(job_table), workers_table(job_table), limits_table(job_table),
            group_rates_table(job_table), dependencies_table(job_table))


def counters_table(job_table: Table) -> Table:
    """The companion of `job_table` that counts events no job row remembers (revision sqlaq_0003).

    An expired lease that was recovered, a retry, a claim that came back empty while jobs were
    pending: a job row keeps none of these (the next claim clears ``last_error``; an empty claim
    has no row at all), yet the health signals need them across processes. One row per
    (minute, queue, kind) holds how many happened, upserted in the transaction of the event
    itself. The table is named ``<job table>_counters`` on the job table's MetaData and schema;
    it is declared on first use, so a job table mapped by other means still finds it.
    """
    return _companion(
        job_table, "counters",
        # Minute start on the database clock. Leading the key: window reads and pruning are
        # range scans on it.
        Column("bucket", DateTime(timezone=True), nullable=False),
        Column("queue_name", Text, nullable=False),
        Column("kind", Text, nullable=False),
        Column("events", BigInteger, nullable=False),
        PrimaryKeyConstraint("bucket", "queue_name", "kind"),
    )


SAMPLE_COUNTS = ("pending", "eligible", "scheduled", "running", "completed", "failed", "retried", "empty_claims")
"""The samples' count columns, named as `HistoryPoint`'s fields."""


def samples_table(job_table: Table) -> Table:
    """``<job table>_samples``: one row per (minute, queue), the history the dashboard plots
    (revision sqlaq_0006, `Queue.history`).

    A row describes the minute that began at ``bucket``: the events counted in it (completions,
    terminal failures, retries, empty claims, completion durations) and the queue's backlog as
    measured just after it ended. Workers write it about once a minute
    (`sqla_queue.sql.samples.record_sample`), the first to get there for the minute, and delete
    rows older than the retention in the same statement, so the table stays a week of minutes.
    """
    return _companion(
        job_table, "samples",
        Column("bucket", DateTime(timezone=True), nullable=False),
        Column("queue_name", Text, nullable=False),
        *(Column(name, Integer, nullable=False, server_default=text("0")) for name in SAMPLE_COUNTS),
        Column("oldest_eligible_age", Interval),
        Column("duration_p50", Interval),
        Column("duration_p95", Interval),
        PrimaryKeyConstraint("bucket", "queue_name"),
    )


def queues_table(job_table: Table) -> Table:
    """``<job table>_queues``: per-queue state every worker reads in its claim (revision
    sqlaq_0005). A row whose ``paused_at`` is set pauses the queue cluster-wide; a queue without
    a row is running, so nothing has to be declared before enqueueing."""
    return _companion(
        job_table, "queues",
        Column("queue_name", Text, primary_key=True),
        Column("paused_at", DateTime(timezone=True)),
    )


def schedules_table(job_table: Table) -> Table:
    """``<job table>_schedules``: the last tick enqueued per periodic schedule (revision
    sqlaq_0005). Advancing ``last_tick`` and inserting the tick's job share one transaction, and
    the advance only happens when the stored tick is older: so each tick is enqueued once, by
    whichever worker gets there first, whatever the number of workers or restarts."""
    return _companion(
        job_table, "schedules",
        Column("name", Text, primary_key=True),
        Column("last_tick", DateTime(timezone=True), nullable=False),
        Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    )


WORKER_STATES = ("running", "stopping")
"""What a worker writes about itself; "dead" is never written: a worker whose ``expires_at``
passed without a heartbeat is dead, whatever its row says."""


def workers_table(job_table: Table) -> Table:
    """``<job table>_workers``: the worker registry (revision sqlaq_0010), one row per worker
    process serving this job table.

    A worker inserts its row when it starts, rewrites ``heartbeat_at`` and ``expires_at`` on
    every beat of its lease keeper (one statement, `sqla_queue.sql.workers`) and deletes the row
    on a clean exit. A row whose ``expires_at`` has passed belongs to a worker that died without
    one (``kill -9``, a lost host): it is shown as dead, and deleted a day later by the next
    worker that starts. ``expires_at`` is the last beat plus the worker's own lease, the time
    after which its jobs' leases have run out too.
    """
    return _companion(
        job_table, "workers",
        Column("id", Text, primary_key=True),
        Column("host", Text, nullable=False),
        Column("pid", Integer, nullable=False),
        Column("version", Text, nullable=False),
        Column("queues", ARRAY(Text), nullable=False),
        Column("tasks", ARRAY(Text), nullable=False),
        Column("concurrency", Integer, nullable=False),
        Column("state", Text, nullable=False, server_default=text("'running'")),
        Column("started_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
        Column("heartbeat_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
        Column("expires_at", DateTime(timezone=True), nullable=False),
        CheckConstraint(f"state IN ({', '.join(repr(state) for state in WORKER_STATES)})", name="state"),
    )


def limits_table(job_table: Table) -> Table:
    """``<job table>_limits``: each limited queue's flow control (revision sqlaq_0011), one row
    per queue, read and locked by every claim of that queue (`sql.claim.limited`).

    ``concurrency``: running jobs of the queue at most; ``group_concurrency``: running jobs per
    group key at most; ``rate`` starts per ``rate_period`` at most for the queue and
    ``group_rate`` per ``group_rate_period`` for each key (token buckets: the queue's in
    ``tokens``/``refilled_at``, each key's in `group_rates_table`); ``fair``: claims take from
    the group keys in turn. NULL: no such limit. A queue without a row is unlimited, and its
    claims never read this table's rows.
    """
    return _companion(
        job_table, "limits",
        Column("queue_name", Text, primary_key=True),
        Column("concurrency", Integer),
        Column("group_concurrency", Integer),
        Column("rate", Integer),
        Column("rate_period", Interval),
        Column("group_rate", Integer),
        Column("group_rate_period", Interval),
        Column("fair", Boolean, nullable=False, server_default=false()),
        Column("tokens", Float),
        Column("refilled_at", DateTime(timezone=True)),
        # The group key the last claim served last: the next claim visits keys after it first.
        Column("last_group_key", Text),
        Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    )


def group_rates_table(job_table: Table) -> Table:
    """``<job table>_group_rates``: one token bucket per (queue, group key) under a
    ``group_rate`` (revision sqlaq_0011), written by the limited claim that starts the key's
    jobs. A bucket that has refilled is the same as no row, so pruning may delete it."""
    return _companion(
        job_table, "group_rates",
        Column("queue_name", Text, nullable=False),
        Column("group_key", Text, nullable=False),
        Column("tokens", Float, nullable=False),
        Column("refilled_at", DateTime(timezone=True), nullable=False),
        PrimaryKeyConstraint("queue_name", "group_key"),
    )


def dependencies_table(job_table: Table) -> Table:
    """``<job table>_dependencies``: one row per edge of a workflow (revision sqlaq_0012): job
    ``job_id`` runs after job ``depends_on`` finished; ``run_anyway``: also when it failed or
    was cancelled (``on_dependency_failure="run"``), else the job is cancelled then.

    Keyed by ``(depends_on, job_id)``: the statement that finishes a job with dependents finds
    them by its id; the second index answers "what does this job wait for" (its handler's
    ``ctx.dependency_results``, ``jobs show``, pruning). No foreign keys: a host's own
    ``TRUNCATE`` of the job table keeps working, and pruning deletes a pruned job's edges itself.
    """
    return _companion(
        job_table, "dependencies",
        Column("depends_on", BigInteger, nullable=False),
        Column("job_id", BigInteger, nullable=False),
        Column("run_anyway", Boolean, nullable=False, server_default=false()),
        PrimaryKeyConstraint("depends_on", "job_id"),
        Index(f"{job_table.name}_dependencies_job_idx", "job_id"),
    )


def _companion(job_table: Table, suffix: str, *columns: Any) -> Table:
    name = f"{job_table.name}_{suffix}"
    key = f"{job_table.schema}.{name}" if job_table.schema else name
    existing = job_table.metadata.tables.get(key)
    if existing is not None:
        return existing
    return Table(name, job_table.metadata, *columns, schema=job_table.schema)


jobs = job_table(DEFAULT_JOB_TABLE, metadata)
"""The default job table, ``sqla_queue_jobs`` (`models.Job` is mapped onto this very object)."""
