"""The partitioned layout's statements: archive finished jobs into the history partitions, and
the catalog reads and DDL that keep those partitions (docs/explanation/storage.md).

A job table converted by `sqla_queue.ops.storage.partition_history` is partitioned by
``archived``: ``<table>_live`` (false) holds what claims, outcomes and enqueues touch, and
``<table>_history`` (true) the finished jobs, by state and then by day of finishing
(``<table>_history_<state>_pYYYYMMDD``, a range on the state's ``finished_at`` column). Every
reader keeps reading the parent, so a job is found wherever it lives.

Partition DDL takes identifiers, never values: names are quoted by the dialect, and the only
literals are day boundaries this module computes.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Integer,
    Table,
    Text,
    any_,
    bindparam,
    cast,
    column,
    exists,
    false,
    func,
    select,
    table,
    text,
    true,
)
from sqlalchemy.dialects.postgresql import ARRAY, OID, insert
from sqlalchemy.sql import Executable

from ..states import State
from ..tables import dependencies_table
from ..types import ACTIVE_STATUSES
from ._predicates import status_is

DAY_FORMAT = "%Y%m%d"

_class = table("pg_class", column("oid", OID), column("relname", Text), column("relnamespace", OID),
               column("relkind", Text), schema="pg_catalog")
_namespace = table("pg_namespace", column("oid", OID), column("nspname", Text), schema="pg_catalog")
_inherits = table("pg_inherits", column("inhrelid", OID), column("inhparent", OID), schema="pg_catalog")


def live_name(job_table: Table) -> str:
    return f"{job_table.name}_live"


def history_name(job_table: Table, state: State | None = None) -> str:
    return f"{job_table.name}_history" + (f"_{state.value}" if state else "")


def day_partition_name(job_table: Table, state: State, day: date) -> str:
    return f"{history_name(job_table, state)}_p{day.strftime(DAY_FORMAT)}"


def day_of(name: str) -> date | None:
    """The day a partition named by `day_partition_name` covers (None: not one of those)."""
    stem, _, suffix = name.rpartition("_p")
    if not stem or len(suffix) != 8 or not suffix.isdigit():
        return None
    return datetime.strptime(suffix, DAY_FORMAT).replace(tzinfo=UTC).date()


def relkind(job_table: Table) -> Executable:
    """``'p'`` for a partitioned job table, ``'r'`` for a plain one, no row if it is missing."""
    schema = job_table.schema or func.current_schema()
    return (select(_class.c.relkind)
            .join(_namespace, _namespace.c.oid == _class.c.relnamespace)
            .where(_class.c.relname == bindparam("name", job_table.name, type_=Text), _namespace.c.nspname == schema))


def partitions_of(job_table: Table) -> Executable:
    """``(parent, name)`` of the partitions directly under the tables named in ``:parents`` (of
    `job_table`'s schema)."""
    schema = job_table.schema or func.current_schema()
    parent = _class.alias("parent")
    return (select(parent.c.relname.label("parent"), _class.c.relname)
            .join(_inherits, _inherits.c.inhrelid == _class.c.oid)
            .join(parent, parent.c.oid == _inherits.c.inhparent)
            .join(_namespace, _namespace.c.oid == parent.c.relnamespace)
            .where(parent.c.relname.in_(bindparam("parents", expanding=True)), _namespace.c.nspname == schema)
            .order_by(_class.c.relname))


def archive_finished(job_table: Table, state: State) -> Executable:
    """Move up to ``:limit`` live jobs that finished in `state` between ``:since`` and ``:until``
    (the span the day partitions cover) into the history; returns how many.

    One statement: the rows are deleted from the live partition and inserted, unchanged but for
    ``archived``, through the parent, which routes them to their day. A concurrent statement
    waiting on such a row then finds it deleted and skips it, as it would a pruned job; an
    UPDATE that moved it across partitions would instead fail that statement with a
    serialization error. SKIP LOCKED leaves a row another transaction holds for the next pass.
    """
    finished_at = job_table.c[state.finished_at]
    live = (status_is(job_table, state.status), job_table.c.archived.is_(false()))
    doomed = (
        select(job_table.c.id)
        .where(*live, finished_at >= bindparam("since"), finished_at < bindparam("until"))
        .order_by(finished_at)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
        .cte("doomed")
    )
    ids = cast(select(func.array_agg(doomed.c.id)).scalar_subquery(), ARRAY(BigInteger))
    gone = job_table.delete().where(job_table.c.id == any_(ids), *live).returning(*job_table.c).cte("gone")
    kept = [c.name for c in job_table.c if c.name != "archived"]
    moved = (
        insert(job_table)
        .from_select([*kept, "archived"], select(*(gone.c[name] for name in kept), true()))
        .returning(job_table.c.id)
        .cte("moved")
    )
    return select(func.count().label("archived")).select_from(moved)


def partition_needed(job_table: Table, partition: str) -> Executable:
    """True when a job of the history partition `partition` still has an active dependent (its
    result is that job's ``ctx.dependency_results``): retention keeps the partition then."""
    rows = table(partition, column("id", BigInteger), column("dependents", Integer), schema=job_table.schema)
    deps = dependencies_table(job_table)
    waiting = job_table.alias("waiting_dependent")
    return select(exists().where(
        rows.c.dependents > 0, deps.c.depends_on == rows.c.id, waiting.c.id == deps.c.job_id,
        status_is(waiting, *ACTIVE_STATUSES)))


def count_rows(job_table: Table, partition: str) -> Executable:
    rows = table(partition, column("id", BigInteger), schema=job_table.schema)
    return select(func.count()).select_from(rows)


def quoted(conn: Any, job_table: Table, name: str) -> str:
    """`name` in `job_table`'s schema, quoted for DDL."""
    prep = conn.dialect.identifier_preparer
    return f"{prep.quote_schema(job_table.schema)}.{prep.quote(name)}" if job_table.schema else prep.quote(name)


def create_day_partition(conn: Any, job_table: Table, state: State, day: date) -> Any:
    """``CREATE TABLE IF NOT EXISTS`` the partition of `state`'s history for `day` (UTC)."""
    low = datetime(day.year, day.month, day.day, tzinfo=UTC)
    high = low + timedelta(days=1)
    return text(
        f"CREATE TABLE IF NOT EXISTS {quoted(conn, job_table, day_partition_name(job_table, state, day))} "
        f"PARTITION OF {quoted(conn, job_table, history_name(job_table, state))} "
        f"FOR VALUES FROM ('{low.isoformat()}') TO ('{high.isoformat()}')")


def drop_partition(conn: Any, job_table: Table, name: str) -> Any:
    return text(f"DROP TABLE IF EXISTS {quoted(conn, job_table, name)}")
