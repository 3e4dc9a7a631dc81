"""Reads of PostgreSQL's statistics views and plans, for `sqla_queue.ops.doctor`.

The views are declared with Core's lightweight ``table()`` / ``column()``, so these statements
are built like every other one: no SQL strings, every value a bound parameter. Ages are computed
on the server (``clock_timestamp() - xact_start``, ``age(xid)``) so the client's clock never
matters. Sessions of other databases are filtered out wherever a check is about this database.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Integer,
    Interval,
    Table,
    Text,
    and_,
    bindparam,
    cast,
    column,
    exists,
    func,
    literal,
    or_,
    select,
    table,
    true,
    union_all,
)
from sqlalchemy.dialects.postgresql import ARRAY, OID, aggregate_order_by, array_agg
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ClauseElement, Executable

from ..states import FINISHED
from ..types import JobStatus
from ._predicates import status_is

QUERY_PREVIEW = 120
"""Characters of a session's current query shown by the doctor (the rest may be long)."""

_activity = table(
    "pg_stat_activity",
    column("pid", Integer),
    column("datname", Text),
    column("usename", Text),
    column("application_name", Text),
    column("backend_type", Text),
    column("state", Text),
    column("xact_start", DateTime(timezone=True)),
    column("query_start", DateTime(timezone=True)),
    column("wait_event_type", Text),
    column("wait_event", Text),
    column("backend_xmin"),
    column("query", Text),
    schema="pg_catalog",
)
_locks = table(
    "pg_locks",
    column("pid", Integer),
    column("locktype", Text),
    column("relation", OID),
    column("mode", Text),
    column("granted"),
    column("waitstart", DateTime(timezone=True)),
    schema="pg_catalog",
)
_class = table("pg_class", column("oid", OID), column("relname", Text), column("relnamespace", OID),
               column("relkind", Text), column("relispartition", Boolean), schema="pg_catalog")
_namespace = table("pg_namespace", column("oid", OID), column("nspname", Text), schema="pg_catalog")
_user_tables = table(
    "pg_stat_user_tables",
    column("relid", OID),
    column("relname", Text),
    column("n_live_tup", BigInteger),
    column("n_dead_tup", BigInteger),
    column("n_mod_since_analyze", BigInteger),
    column("last_vacuum", DateTime(timezone=True)),
    column("last_autovacuum", DateTime(timezone=True)),
    column("last_autoanalyze", DateTime(timezone=True)),
    column("autovacuum_count", BigInteger),
    schema="pg_catalog",
)
_slots = table(
    "pg_replication_slots",
    column("slot_name", Text),
    column("slot_type", Text),
    column("database", Text),
    column("active"),
    column("xmin"),
    column("catalog_xmin"),
    schema="pg_catalog",
)
_prepared = table(
    "pg_prepared_xacts",
    column("gid", Text),
    column("database", Text),
    column("owner", Text),
    column("prepared", DateTime(timezone=True)),
    column("transaction"),
    schema="pg_catalog",
)


class Explain(Executable, ClauseElement):
    """``EXPLAIN (FORMAT JSON) <statement>``: plans the statement without running it. Its bound
    parameters stay parameters, so the plan is the one the real statement gets. With `analyze`,
    ``EXPLAIN (ANALYZE, ...)`` runs it too (roll back what it wrote) and reports what each node
    did: a node that never ran has ``Actual Loops`` 0."""

    inherit_cache = False

    def __init__(self, statement: Any, analyze: bool = False) -> None:
        self.statement = statement
        self.analyze = analyze


@compiles(Explain, "postgresql")
def _compile_explain(element: Explain, compiler: Any, **kw: Any) -> str:
    text = ("EXPLAIN (ANALYZE, FORMAT JSON) " if element.analyze else "EXPLAIN (FORMAT JSON) ") + \
        compiler.process(element.statement, **kw)
    # The plan is a result of its own: the compiler must not treat it as the UPDATE's RETURNING
    # (SQLAlchemy's documented EXPLAIN recipe does the same).
    compiler.isinsert = compiler.isupdate = compiler.isdelete = False
    return text


def explain(statement: Any, *, analyze: bool = False) -> Executable:
    return Explain(statement, analyze)


def set_local() -> Executable:
    """``SET LOCAL :setting = :value`` as a function call (``set_config(..., true)``), so the
    setting and its value are parameters: it ends with the transaction."""
    return select(func.set_config(bindparam("setting", type_=Text), bindparam("value", type_=Text), true()))


def _relation_oid(job_table: Table):
    """The job table's oid, found by name and schema (no identifier parsing, no quoting)."""
    schema = job_table.schema if job_table.schema is not None else func.current_schema()
    return (
        select(_class.c.oid)
        .join(_namespace, _namespace.c.oid == _class.c.relnamespace)
        .where(_class.c.relname == job_table.name, _namespace.c.nspname == schema)
        .scalar_subquery()
    )


def _claimed_relation_oid(job_table: Table):
    """The table claims write: the job table itself, or its live partition when the table is
    partitioned (`sqla_queue.ops.storage`; the parent has no statistics of its own)."""
    schema = job_table.schema if job_table.schema is not None else func.current_schema()
    return (
        select(_class.c.oid)
        .join(_namespace, _namespace.c.oid == _class.c.relnamespace)
        .where(_class.c.relname.in_([job_table.name, f"{job_table.name}_live"]), _class.c.relkind == "r",
               _namespace.c.nspname == schema)
        .order_by(_class.c.relispartition.desc())
        .limit(1)
        .scalar_subquery()
    )


def _preview(query):
    return func.left(query, QUERY_PREVIEW).label("query")


def long_transactions() -> Executable:
    """Client sessions of this database whose transaction is older than ``:max_age``."""
    a = _activity
    return (
        select(
            a.c.pid, a.c.application_name, a.c.state, a.c.wait_event_type, a.c.wait_event,
            (func.clock_timestamp() - a.c.xact_start).label("age"), _preview(a.c.query),
        )
        .where(
            a.c.datname == func.current_database(),
            a.c.backend_type == "client backend",
            a.c.pid != func.pg_backend_pid(),
            a.c.xact_start < func.clock_timestamp() - bindparam("max_age", type_=Interval),
        )
        .order_by(a.c.xact_start)
    )


def hidden_sessions() -> Executable:
    """How many sessions of this database hide their state from this role: another role's, seen
    without ``pg_read_all_stats`` (``pg_monitor``). PostgreSQL then shows their pid, database
    and user but NULL for the backend type, the state and the transaction start."""
    a = _activity
    return select(func.count()).where(
        a.c.datname == func.current_database(),
        a.c.usename.is_not(None),
        a.c.state.is_(None),
    )


def lock_waits(job_table: Table) -> Executable:
    """Sessions waiting longer than ``:min_wait`` for a lock while holding or wanting a lock on
    the job table, with the pids that block them.

    A row-lock wait shows as an ungranted ``transactionid`` lock; the waiter also holds a lock
    on the table (the one its UPDATE took), which is how it is tied to the queue. SKIP LOCKED
    claims never wait, so anything here is a transaction that does.
    """
    waiting, on_table, a = _locks.alias("waiting"), _locks.alias("on_table"), _activity
    touches_table = exists().where(
        on_table.c.pid == waiting.c.pid, on_table.c.relation == _relation_oid(job_table)
    )
    return (
        select(
            waiting.c.pid, waiting.c.locktype, waiting.c.mode, a.c.application_name, a.c.state,
            (func.clock_timestamp() - waiting.c.waitstart).label("waited"),
            cast(func.pg_blocking_pids(waiting.c.pid), ARRAY(Integer)).label("blocked_by"),
            _preview(a.c.query),
        )
        .join_from(waiting, a, a.c.pid == waiting.c.pid)
        .where(
            ~waiting.c.granted,
            a.c.datname == func.current_database(),
            touches_table,
            waiting.c.waitstart < func.clock_timestamp() - bindparam("min_wait", type_=Interval),
        )
        .order_by(waiting.c.waitstart)
    )


def table_vacuum_stats(job_table: Table) -> Executable:
    """Live and dead tuples, vacuum history and sizes of the job table (pg_stat_user_tables):
    of its live partition when it is partitioned, named by ``relname``."""
    t = _user_tables
    return select(
        t.c.relname, t.c.n_live_tup, t.c.n_dead_tup, t.c.n_mod_since_analyze, t.c.last_vacuum,
        t.c.last_autovacuum, t.c.last_autoanalyze, t.c.autovacuum_count,
        func.pg_table_size(t.c.relid).label("table_bytes"),
        func.pg_indexes_size(t.c.relid).label("index_bytes"),
        func.now().label("now"),
    ).where(t.c.relid == _claimed_relation_oid(job_table))


def horizon_backends() -> Executable:
    """Every session, in any database, that holds a snapshot (``backend_xmin``), oldest first.

    ``in_scope`` marks the ones that hold back vacuum of *this* database's tables: its own
    sessions, and sessions with no database (a walsender relaying a standby's
    ``hot_standby_feedback``). Since PostgreSQL 14 another database's snapshot does not stop
    vacuum here, so those are listed for context only. Autovacuum workers are left out: their
    snapshots are short and not actionable.
    """
    a = _activity
    return (
        select(
            a.c.pid, a.c.datname, a.c.backend_type, a.c.application_name, a.c.state,
            func.age(a.c.backend_xmin).label("xmin_age"),
            a.c.xact_start,
            (func.clock_timestamp() - a.c.xact_start).label("age"),
            (func.clock_timestamp() - a.c.query_start).label("query_age"),
            or_(a.c.datname == func.current_database(), a.c.datname.is_(None)).label("in_scope"),
        )
        .where(
            a.c.backend_xmin.is_not(None),
            a.c.pid != func.pg_backend_pid(),
            a.c.backend_type != "autovacuum worker",
        )
        .order_by(func.age(a.c.backend_xmin).desc())
        .limit(bindparam("limit"))
    )


def horizon_slots() -> Executable:
    """Replication slots that pin a horizon: ``xmin`` holds back vacuum of every table in the
    cluster, ``catalog_xmin`` only of system catalogs."""
    s = _slots
    return select(
        s.c.slot_name, s.c.slot_type, s.c.database, s.c.active,
        func.age(s.c.xmin).label("xmin_age"),
        func.age(s.c.catalog_xmin).label("catalog_xmin_age"),
    ).where(or_(s.c.xmin.is_not(None), s.c.catalog_xmin.is_not(None)))


def horizon_prepared() -> Executable:
    """Prepared (two-phase) transactions: they hold their snapshot until COMMIT/ROLLBACK
    PREPARED, even with no session attached, so nothing but an operator ends them. Like a
    session's, a prepared transaction's snapshot holds back vacuum of its own database only."""
    p = _prepared
    return select(
        p.c.gid, p.c.database, p.c.owner, p.c.prepared,
        (func.clock_timestamp() - p.c.prepared).label("age"),
        func.age(p.c.transaction).label("xmin_age"),
        (p.c.database == func.current_database()).label("in_scope"),
    ).order_by(p.c.prepared)


def jobs_finished_since(job_table: Table) -> Executable:
    """How many of the table's jobs finished at or after ``:since``, counting to ``:cap`` at
    most: each left index entries (its claim's, in the pending index) and row versions that no
    VACUUM removes while a snapshot from before ``:since`` lives. Ranges on the finished-at
    indexes, one per terminal state, stopped at the cap."""
    t = job_table
    since = bindparam("since", type_=DateTime(timezone=True))
    finished = union_all(*(
        select(literal(1).label("one")).where(status_is(t, state.status), t.c[state.finished_at] >= since)
        for state in FINISHED
    )).limit(bindparam("cap", type_=Integer)).subquery("finished_since")
    return select(func.count()).select_from(finished)


def stuck_running(job_table: Table) -> Executable:
    """Running jobs whose holder's lease ended more than ``:grace`` ago (or, claimed before
    sqlaq_0008 with no lease end, that were claimed more than ``:lease`` ago), per queue:
    recovery should have taken them back. Ranges on the running-jobs indexes."""
    t = job_table
    now = func.clock_timestamp()
    stuck = or_(
        t.c.lease_expires_at < now - bindparam("grace", type_=Interval),
        and_(t.c.lease_expires_at.is_(None), t.c.locked_at < now - bindparam("lease", type_=Interval)),
    )
    return (
        select(
            t.c.queue_name,
            cast(func.count(), Integer).label("jobs"),
            (func.clock_timestamp() - func.min(t.c.locked_at)).label("oldest"),
        )
        .where(status_is(t, JobStatus.RUNNING), stuck)
        .group_by(t.c.queue_name)
        .order_by(t.c.queue_name)
    )


def recent_failures(job_table: Table) -> Executable:
    """Terminal failures since ``:since`` ago per queue, with the latest error of each queue.
    A range on the failed-at index."""
    t = job_table
    latest = func.max(t.c.failed_at)
    return (
        select(
            t.c.queue_name,
            cast(func.count(), Integer).label("jobs"),
            array_agg(aggregate_order_by(t.c.last_error, t.c.failed_at.desc()))[1].label("latest_error"),
        )
        .where(status_is(t, JobStatus.FAILED), t.c.failed_at >= func.now() - bindparam("since", type_=Interval))
        .group_by(t.c.queue_name)
        .order_by(latest.desc())
    )

