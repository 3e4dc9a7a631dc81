"""``sqla-queue doctor``: the "observe queue health, not only lock waits" advice, as checks with verdicts.

Each check reads PostgreSQL's own views (pg_stat_activity, pg_locks, pg_stat_user_tables,
pg_replication_slots, pg_prepared_xacts), the claim's plan, or the job table through one of its
partial indexes, and returns a `Check`: a verdict, what it saw, and a hint saying what to do.
A failed check makes the command exit 1, so it can run from cron or a readiness probe.

The checks look for the ways PostgreSQL queues really degrade: a claim that stopped using the
pending index, transactions that hold locks or snapshots, and above all dead tuples that vacuum
cannot remove because something holds the xmin horizon back. Each check runs in a transaction
of its own with ``lock_timeout`` and ``statement_timeout`` set, so a sick database gets an
answer, not a hang.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from .. import _validate
from ..errors import ConfigurationError, DatabaseError, PermissionDeniedError
from ..sql import catalog
from ..sql import stats as stats_sql
from ..types import DEFAULT_LEASE
from .formatting import format_duration, format_size
from .redaction import one_line, query_preview
from .verdicts import Check, Report, Verdict

if TYPE_CHECKING:
    from ..queue import Queue


@dataclass(frozen=True)
class DoctorConfig:
    """Thresholds, validated at construction (`ConfigurationError`).

    :param lease: the workers' lease. A running job whose lease expired more than one more
        lease ago is stuck: every worker runs recovery each half lease. Default 60 s.
    :param max_transaction_age: a transaction (or a snapshot holding the vacuum horizon) older
        than this fails. Default 5 minutes.
    :param horizon_warning: a snapshot or prepared transaction of this database holding the
        vacuum horizon for longer than this warns, naming it: dead tuples pile up from its
        first second, so the warning comes long before claims have slowed much. Default 60 s
        (one past `max_transaction_age` fails instead).
    :param horizon_jobs: a snapshot or prepared transaction of this database holding the vacuum
        horizon while this many of the table's jobs have finished since it began warns at
        once, however young it is: each of those jobs left an index entry the claim reads past
        until VACUUM may remove it, so on a busy queue the claim slows within seconds, long
        before `horizon_warning`. Default 10,000; 0 turns the rule off.
    :param max_lock_wait: a lock wait involving the queue table longer than this fails.
        Default 5 s; SKIP LOCKED claims never wait, so any wait is someone else's.
    :param max_xmin_age: a replication slot or standby holding the horizon back by more than
        this many transactions fails. Default 1,000,000.
    :param dead_tuples_min: dead tuples below this never fail. Default 10,000.
    :param dead_tuples_ratio: dead tuples above this fraction of live ones (and above
        `dead_tuples_min`) fail. Default 0.2, autovacuum's own default scale factor.
    :param failed_window: how far back to count terminal failures. Default one hour.
    :param max_failed: more failures than this in the window fail; with None (the default)
        failures only warn: a failing job is the application's business, not an outage.
    :param max_latency: a queue whose oldest eligible job has waited longer than this fails
        (the queue latency check). Default 5 minutes.
    :param claim_queue: the queue whose claim is planned. Default ``"default"``.
    :param small_table_rows: below this many live rows a sequential scan is a fine claim plan,
        so the planner is asked again with sequential scans off. Default 10,000.
    :param statement_timeout: seconds any one check may take. Default 10.
    """

    lease: timedelta = DEFAULT_LEASE
    max_transaction_age: timedelta = timedelta(minutes=5)
    horizon_warning: timedelta = timedelta(seconds=60)
    horizon_jobs: int = 10_000
    max_lock_wait: timedelta = timedelta(seconds=5)
    max_xmin_age: int = 1_000_000
    dead_tuples_min: int = 10_000
    dead_tuples_ratio: float = 0.2
    failed_window: timedelta = timedelta(hours=1)
    max_failed: int | None = None
    max_latency: timedelta = timedelta(minutes=5)
    claim_queue: str = "default"
    small_table_rows: int = 10_000
    statement_timeout: float = 10.0

    def __post_init__(self) -> None:
        for name, positive in (("lease", True), ("max_transaction_age", False), ("horizon_warning", False),
                               ("max_lock_wait", False), ("failed_window", True),
                               ("max_latency", False)):
            value = _config(_validate.duration, getattr(self, name), name, positive=positive)
            object.__setattr__(self, name, value)
        for name in ("max_xmin_age", "horizon_jobs", "dead_tuples_min", "small_table_rows"):
            _config(_validate.non_negative_int, getattr(self, name), name)
        if self.max_failed is not None:
            _config(_validate.non_negative_int, self.max_failed, "max_failed")
        for name in ("dead_tuples_ratio", "statement_timeout"):
            _validate.positive_number(getattr(self, name), name, error=ConfigurationError)
        _config(_validate.name, self.claim_queue, "claim_queue")

    @property
    def stuck_after(self) -> timedelta:
        return self.lease * 2


_config = _validate.as_config


class Doctor:
    """Runs every check against `queue`'s database and table."""

    def __init__(self, queue: Queue, config: DoctorConfig | None = None, **options: Any) -> None:
        if config is not None and options:
            raise ConfigurationError("pass a DoctorConfig or options, not both")
        if config is None:
            known = {f.name for f in fields(DoctorConfig)}
            unknown = sorted(set(options) - known)
            if unknown:
                raise ConfigurationError(f"unknown doctor option(s) {', '.join(unknown)}")
            config = DoctorConfig(**options)
        self.queue = queue
        self.config = config
        self.table = queue.table

    def checks(self) -> list[tuple[str, Callable[[Connection], Check]]]:
        return [
            ("claim plan", self.check_claim_plan),
            ("long transactions", self.check_long_transactions),
            ("lock waits", self.check_lock_waits),
            ("dead tuples", self.check_dead_tuples),
            ("vacuum horizon", self.check_vacuum_horizon),
            ("stuck jobs", self.check_stuck_jobs),
            ("recent failures", self.check_recent_failures),
            ("unserved queues", self.check_unserved_queues),
            ("unregistered tasks", self.check_unregistered_tasks),
            ("queue latency", self.check_queue_latency),
        ]

    def run(self) -> Report:
        """Every check, in order. A database that cannot be reached at all raises
        `DatabaseError` (the CLI exits 1) rather than failing every check one by one."""
        with self._transaction() as conn:
            conn.execute(stats_sql.database_now())
        return Report(tuple(self._run_one(name, check) for name, check in self.checks()))

    def _run_one(self, name: str, check: Callable[[Connection], Check]) -> Check:
        """A check that cannot run fails, with the reason: for a readiness probe, a database too
        slow to answer its catalog within the statement timeout is not ready. One the role may
        not run warns instead: that says nothing about the database's health (a read-only role
        cannot EXPLAIN the claim, an UPDATE)."""
        try:
            with self._transaction() as conn:
                return check(conn)
        except PermissionDeniedError as exc:
            return Check(name, Verdict.WARN, f"this role may not run this check: {exc}",
                         "EXPLAIN needs the privileges of the statement it explains: the claim plan "
                         "check needs UPDATE on the job table (run doctor as the operator's or the "
                         "worker's role); docs/how-to/database-roles.md.")
        except DatabaseError as exc:
            return Check(name, Verdict.FAIL, f"could not run this check: {exc}",
                         "A timeout means the database is too slow to answer catalog reads.")

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        with self.queue.core.executor.transaction() as conn:
            timeout = f"{int(self.config.statement_timeout * 1000)}ms"
            for setting, value in (("statement_timeout", timeout), ("lock_timeout", "2s")):
                conn.execute(catalog.set_local(), {"setting": setting, "value": value})
            yield conn

    # -- the checks ---------------------------------------------------------------------

    def check_claim_plan(self, conn: Connection) -> Check:
        """The claim (in the queue's claim order) must read the order's pending partial index;
        on a small table the planner may prefer a sequential scan, so it is asked again with
        sequential scans off."""
        index = self.queue.core.executor.order.index_name(self.table)
        plan = self._claim_plan(conn)
        if index in _indexes(plan):
            return Check("claim plan", Verdict.OK, f"the claim reads {index}")
        live = self._live_rows(conn)
        if live < self.config.small_table_rows:
            conn.execute(catalog.set_local(), {"setting": "enable_seqscan", "value": "off"})
            if index in _indexes(self._claim_plan(conn)):
                return Check("claim plan", Verdict.OK,
                             f"the table is small ({live} live rows) and a sequential scan is cheaper "
                             f"for now; the claim can use {index}")
        return Check(
            "claim plan", Verdict.FAIL,
            f"the claim does not use {index}: {_plan_shape(plan)}",
            "Check that the index exists and is valid (an interrupted CREATE INDEX CONCURRENTLY "
            "leaves it INVALID: drop and rebuild it), then ANALYZE the table. The status must be "
            "the literal 'pending', never a parameter, for the planner to prove the predicate.",
        )

    def _claim_plan(self, conn: Connection) -> dict[str, Any]:
        params = {"queue": self.config.claim_queue, "worker_id": "sqla-queue-doctor", "limit": 1,
                  "token": "explain-only", "lease": self.config.lease}
        [[document]] = conn.execute(self.queue.core.statements.claim_plan, params).all()
        return (document if isinstance(document, list) else json.loads(document))[0]["Plan"]

    def _live_rows(self, conn: Connection) -> int:
        row = conn.execute(catalog.table_vacuum_stats(self.table)).first()
        return int(row.n_live_tup) if row is not None else 0

    def check_long_transactions(self, conn: Connection) -> Check:
        rows = conn.execute(catalog.long_transactions(), {"max_age": self.config.max_transaction_age}).all()
        limit = format_duration(self.config.max_transaction_age)
        if not rows:
            hidden = conn.execute(catalog.hidden_sessions()).scalar_one()
            if hidden:
                return Check(
                    "long transactions", Verdict.WARN,
                    f"no transaction this role can see is older than {limit}, but {hidden} session(s) of "
                    "other roles hide their transactions from it",
                    "Without pg_monitor (or pg_read_all_stats), PostgreSQL hides other roles' sessions' "
                    "state: grant it to the role doctor runs as (docs/how-to/database-roles.md).",
                )
            return Check("long transactions", Verdict.OK, f"no transaction in this database is older than {limit}")
        return Check(
            "long transactions", Verdict.FAIL,
            f"{len(rows)} session(s) in a transaction for more than {limit}; oldest {format_duration(rows[0].age)}",
            "A long transaction holds its locks and its snapshot: vacuum cannot remove the queue's "
            "dead tuples meanwhile. Find the application that leaves it open (idle in transaction "
            "means it is waiting on the client); end it with SELECT pg_terminate_backend(pid). "
            "Set idle_in_transaction_session_timeout to stop it recurring.",
            tuple(f"pid {r.pid} ({r.application_name or 'no application_name'}, {r.state}) "
                  f"for {format_duration(r.age)}: {query_preview(r.query)}" for r in rows),
        )

    def check_lock_waits(self, conn: Connection) -> Check:
        params = {"min_wait": self.config.max_lock_wait}
        rows = conn.execute(catalog.lock_waits(self.table), params).all()
        limit = format_duration(self.config.max_lock_wait)
        if not rows:
            return Check("lock waits", Verdict.OK, f"no session has waited more than {limit} for a lock "
                                                   f"involving {self.table.name}")
        return Check(
            "lock waits", Verdict.FAIL,
            f"{len(rows)} session(s) waiting more than {limit} on locks involving {self.table.name}",
            "Claims never wait (SKIP LOCKED), so a wait comes from a transaction that locks job rows "
            "or the table itself: DDL (ALTER TABLE, a non-concurrent CREATE INDEX), an operator's "
            "UPDATE, or a host transaction that enqueued and then waited on something else. End the "
            "blocker (pg_terminate_backend) or let it finish.",
            tuple(f"pid {r.pid} waits {format_duration(r.waited)} for {r.mode} ({r.locktype}), blocked by "
                  f"{', '.join(map(str, r.blocked_by or [])) or 'nobody (granted meanwhile)'}: {query_preview(r.query)}"
                  for r in rows),
        )

    def check_dead_tuples(self, conn: Connection) -> Check:
        row = conn.execute(catalog.table_vacuum_stats(self.table)).first()
        if row is None:
            return Check("dead tuples", Verdict.FAIL, f"table {self.table.name} not found in pg_stat_user_tables",
                         "Run `sqla-queue db upgrade` (or your Alembic upgrade) on this database.")
        threshold = max(self.config.dead_tuples_min, int(self.config.dead_tuples_ratio * row.n_live_tup))
        vacuumed = _last_vacuum(row)
        summary = (f"{row.n_dead_tup} dead and {row.n_live_tup} live tuples; {vacuumed}; "
                   f"table {format_size(row.table_bytes)}, indexes {format_size(row.index_bytes)}")
        if row.n_dead_tup < threshold:
            return Check("dead tuples", Verdict.OK, summary)
        return Check(
            "dead tuples", Verdict.FAIL, f"{summary} (limit {threshold})",
            "Dead index entries make every claim walk further (see the vacuum horizon check for "
            f"what may stop their removal). Run VACUUM (VERBOSE) {row.relname}; then make "
            f"autovacuum visit more often: ALTER TABLE {row.relname} SET "
            "(autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000).",
        )

    def check_vacuum_horizon(self, conn: Connection) -> Check:
        """What keeps vacuum from removing dead tuples: the oldest snapshot (``backend_xmin``) of
        a session of this database or of a standby's feedback, replication slots (cluster-wide)
        and this database's prepared transactions. Other databases' sessions and prepared
        transactions are shown but do not count: since PostgreSQL 14 they do not hold back
        vacuum of this database's tables. A session or prepared transaction holding it past
        `horizon_warning` warns, a holder past the limits fails."""
        holders = list(self._horizon_holders(conn))
        details = tuple(text for text, _ in holders)
        for verdict in (Verdict.FAIL, Verdict.WARN):
            named = [text for text, level in holders if level is verdict]
            if named:
                return self._horizon_held(verdict, named[0], details)
        return Check("vacuum horizon", Verdict.OK,
                     "nothing holds the vacuum horizon of this database back beyond the limits",
                     details=details)

    def _horizon_held(self, verdict: Verdict, holder: str, details: tuple[str, ...]) -> Check:
        summary = f"vacuum of this database is held back by {holder}"
        if verdict is Verdict.WARN:
            summary += (f" (warns past {format_duration(self.config.horizon_warning)}, or once "
                        f"{self.config.horizon_jobs:,} jobs have finished since it began)")
        return Check(
            "vacuum horizon", verdict, summary,
            "Until it ends, every completed job stays in the table and its indexes as a dead "
            "tuple and claims slow down. End the session (pg_terminate_backend), drop an "
            "abandoned replication slot (pg_drop_replication_slot), or COMMIT/ROLLBACK PREPARED "
            "the forgotten transaction. On a standby, hot_standby_feedback relays its queries' "
            "snapshots here.",
            details,
        )

    def _horizon_holders(self, conn: Connection) -> Iterator[tuple[str, Verdict | None]]:
        """Each holder's line and what it earns in this database: FAIL, WARN or None."""
        for r in conn.execute(catalog.horizon_backends(), {"limit": 5}):
            scope = "" if r.in_scope else " [other database: does not hold back this one]"
            query = "" if r.query_age is None else f", its query started {format_duration(r.query_age)} ago"
            finished = self._finished_since(conn, r.xact_start if r.in_scope else None)
            yield (f"pid {r.pid} ({r.backend_type}, {r.application_name or 'no application_name'}, "
                   f"{r.state or 'no state'}, database {r.datname or '-'}): snapshot {r.xmin_age} xids "
                   f"old, transaction open {format_duration(r.age)}{query}{self._finished_text(finished)}{scope}",
                   self._held_for(r.in_scope, r.age, r.xmin_age, finished))
        for r in conn.execute(catalog.horizon_slots()):
            if r.xmin_age is not None:
                yield (f"replication slot {r.slot_name} ({r.slot_type}, {'active' if r.active else 'inactive'}): "
                       f"xmin {r.xmin_age} xids old", self._held_for(True, None, r.xmin_age))
            if r.catalog_xmin_age is not None:
                yield (f"replication slot {r.slot_name}: catalog_xmin {r.catalog_xmin_age} xids old "
                       "[system catalogs only]", None)
        for r in conn.execute(catalog.horizon_prepared()):
            scope = "" if r.in_scope else " [other database: does not hold back this one]"
            finished = self._finished_since(conn, r.prepared if r.in_scope else None)
            yield (f"prepared transaction {r.gid!r} (database {r.database}, owner {r.owner}) "
                   f"prepared {format_duration(r.age)} ago{self._finished_text(finished)}{scope}",
                   self._held_for(r.in_scope, r.age, None, finished))

    def _finished_since(self, conn: Connection, since: datetime | None) -> int | None:
        """Jobs of the table finished since `since`, up to `horizon_jobs` (None: not counted)."""
        if since is None or not self.config.horizon_jobs:
            return None
        return conn.execute(catalog.jobs_finished_since(self.table),
                            {"since": since, "cap": self.config.horizon_jobs}).scalar_one()

    def _finished_text(self, finished: int | None) -> str:
        if finished is None:
            return ""
        at_least = "at least " if finished >= self.config.horizon_jobs else ""
        return f", {at_least}{finished:,} jobs finished since it began"

    def _held_for(self, in_scope: bool, age: timedelta | None, xmin_age: int | None,
                  finished: int | None = None) -> Verdict | None:
        """A holder's verdict by how long it has held and how many jobs finished meanwhile (or,
        with no start time, how many xids)."""
        if not in_scope:
            return None
        if age is not None:
            if age > self.config.max_transaction_age:
                return Verdict.FAIL
            if age > self.config.horizon_warning:
                return Verdict.WARN
            return Verdict.WARN if finished is not None and finished >= self.config.horizon_jobs else None
        return Verdict.FAIL if xmin_age is not None and xmin_age > self.config.max_xmin_age else None

    def check_stuck_jobs(self, conn: Connection) -> Check:
        stuck_after = self.config.stuck_after
        rows = conn.execute(catalog.stuck_running(self.table),
                            {"grace": self.config.lease, "lease": stuck_after}).all()
        if not rows:
            return Check("stuck jobs", Verdict.OK, f"no running job's lease expired more than "
                                                   f"{format_duration(self.config.lease)} ago")
        total = sum(r.jobs for r in rows)
        return Check(
            "stuck jobs", Verdict.FAIL,
            f"{total} running job(s) whose lease ({format_duration(self.config.lease)}) expired long ago",
            "Their workers are gone and no process is recovering leases (every worker does, each "
            "half lease). Start a worker, or run `sqla-queue recover --lease SECONDS` with the "
            "workers' lease. If workers are running, check that they use the same --lease.",
            tuple(f"queue {r.queue_name}: {r.jobs} job(s), oldest claimed {format_duration(r.oldest)} ago" for r in rows),
        )

    def check_recent_failures(self, conn: Connection) -> Check:
        rows = conn.execute(catalog.recent_failures(self.table), {"since": self.config.failed_window}).all()
        window = format_duration(self.config.failed_window)
        total = sum(r.jobs for r in rows)
        details = tuple(f"queue {r.queue_name}: {r.jobs} failed, latest error: {one_line(r.latest_error)}"
                        for r in rows)
        if total == 0:
            return Check("recent failures", Verdict.OK, f"no job failed for good in the last {window}")
        hint = ("List them with `sqla-queue jobs list --status failed`; once the cause is fixed, "
                "`sqla-queue jobs retry ID` runs one again.")
        limit = self.config.max_failed
        verdict = Verdict.FAIL if limit is not None and total > limit else Verdict.WARN
        return Check("recent failures", verdict, f"{total} job(s) failed for good in the last {window}",
                     hint, details)

    # -- work nobody takes: the worker registry against the eligible jobs ----------------

    def _demand(self, conn: Connection) -> list[Any]:
        """Eligible jobs per (queue, task) with whether a live worker serves the queue and one
        registers the task for it; paused queues left out (`sql.workers.eligible_demand`)."""
        return conn.execute(self.queue.core.statements.eligible_demand).all()

    def check_unserved_queues(self, conn: Connection) -> Check:
        """Eligible jobs on a queue that no live worker serves will wait until one starts."""
        unserved: dict[str, list[Any]] = {}
        for row in self._demand(conn):
            if not row.queue_served:
                unserved.setdefault(row.queue_name, []).append(row)
        if not unserved:
            return Check("unserved queues", Verdict.OK, "every queue with eligible jobs has a live worker serving it")
        names = ", ".join(unserved)
        return Check(
            "unserved queues", Verdict.FAIL,
            f"eligible jobs wait on {len(unserved)} queue(s) that no live worker serves: {names}",
            "Start a worker that serves them (`sqla-queue worker --queues NAME`, or a worker whose app "
            "registers their tasks), or pause a queue on purpose (`sqla-queue queues pause NAME`). "
            "`sqla-queue workers` lists the live workers and the queues each serves.",
            tuple(f"queue {name}: {sum(r.jobs for r in rows)} eligible job(s), oldest waiting "
                  f"{format_duration(max(r.oldest_age for r in rows))}" for name, rows in unserved.items()),
        )

    def check_unregistered_tasks(self, conn: Connection) -> Check:
        """Deploy skew: the queue is served, but no live worker serving it registers the task
        (old workers still running after a deploy added the task, or a task left in one app)."""
        skewed = [row for row in self._demand(conn) if row.queue_served and not row.task_served]
        if not skewed:
            return Check("unregistered tasks", Verdict.OK,
                         "every eligible job's task is registered by a live worker serving its queue")
        return Check(
            "unregistered tasks", Verdict.FAIL,
            f"{sum(r.jobs for r in skewed)} eligible job(s) of {len({r.task for r in skewed})} task(s) that "
            "no live worker serving their queue registers",
            "Deploy skew: the workers that serve these queues run code without these tasks. Finish the "
            "deploy (restart the workers with the new code), or start a worker whose app registers "
            "them; `sqla-queue workers --json` shows each worker's tasks.",
            tuple(f"task {r.task}: {r.jobs} job(s), no live worker registers it (queue {r.queue_name})"
                  for r in skewed),
        )

    def check_queue_latency(self, conn: Connection) -> Check:
        """The oldest eligible job's wait per queue against `max_latency`: the symptom users
        feel, whatever the cause (too few workers, slow handlers, nobody serving the queue)."""
        limit = self.config.max_latency
        ages: dict[str, timedelta] = {}
        for row in self._demand(conn):
            ages[row.queue_name] = max(ages.get(row.queue_name, row.oldest_age), row.oldest_age)
        late = {name: age for name, age in ages.items() if age > limit}
        if not late:
            oldest = f"; oldest eligible job waited {format_duration(max(ages.values()))}" if ages else ""
            return Check("queue latency", Verdict.OK,
                         f"no queue's oldest eligible job has waited more than {format_duration(limit)}{oldest}")
        return Check(
            "queue latency", Verdict.FAIL,
            f"{len(late)} queue(s) whose oldest eligible job waited more than {format_duration(limit)}: "
            f"{', '.join(late)}",
            "Jobs are due but not claimed fast enough: check that workers serve the queue (the "
            "unserved queues check), then add workers or concurrency (`sqla-queue stats` shows the "
            "backlog; docs/how-to/operations.md).",
            tuple(f"queue {name}: oldest eligible job waiting {format_duration(age)}" for name, age in late.items()),
        )


# -- formatting ----------------------------------------------------------------------------


def _indexes(plan: dict[str, Any]) -> set[str]:
    found = {plan["Index Name"]} if "Index Name" in plan else set()
    for child in plan.get("Plans", []):
        found |= _indexes(child)
    return found


def _plan_shape(plan: dict[str, Any]) -> str:
    node = plan["Node Type"] + (f" on {plan['Relation Name']}" if "Relation Name" in plan else "")
    children = [_plan_shape(child) for child in plan.get("Plans", [])]
    return node + (f" ({'; '.join(children)})" if children else "")


def _last_vacuum(row: Any) -> str:
    times = [t for t in (row.last_vacuum, row.last_autovacuum) if t is not None]
    if not times:
        return "never vacuumed since statistics were reset"
    return f"last vacuumed {format_duration(row.now - max(times))} ago ({row.autovacuum_count} autovacuum runs)"
