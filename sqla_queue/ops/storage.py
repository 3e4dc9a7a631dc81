"""The partitioned layout: finished jobs out of the claim's table, retention by dropping a day.

`partition_history` converts a job table online (docs/explanation/storage.md says why and what
it costs); from then on the workers keep it (`sqla_queue.services.archiving`).
"""

from __future__ import annotations

import logging
import time
from datetime import date, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, Table, text
from sqlalchemy.exc import OperationalError

from ..errors import ConfigurationError
from ..services.archiving import DEFAULT_LOCK_TIMEOUT, History
from ..sql import history as sql
from ..states import FINISHED
from ..tables import job_table_of

logger = logging.getLogger("sqla_queue.maintenance")

MAX_NAME = 63


def partition_history(engine: Engine, model: Any = None, *, lock_timeout: timedelta = DEFAULT_LOCK_TIMEOUT) -> bool:
    """Convert the job table of `model` (None: the default one) to the partitioned layout, with
    jobs flowing; False if it already is.

    Four short steps, each its own transaction, none holding a lock that blocks claims for
    longer than catalog changes take: (1) a NOT VALID ``CHECK (archived IS FALSE)``; (2) its
    validation, a scan under SHARE UPDATE EXCLUSIVE, which lets enqueues, claims and outcomes
    run; (3) the swap, under ACCESS EXCLUSIVE for catalog changes only: the table is renamed to
    ``<table>_live``, a partitioned parent takes its name and identity (continuing its ids), the
    old table is attached as the live partition (the validated CHECK spares the scan) and the
    history tree is created; (4) the day partitions, tried again (up to `DAY_ATTEMPTS` times)
    when a worker's statement and this step deadlock on the histories' locks. A step that cannot
    get its lock within `lock_timeout` fails with nothing of it done, and the conversion can be
    run again.

    The workers then archive the jobs that finish from the day before the conversion on; those
    that finished earlier stay in the live partition and are pruned by DELETE, as before.
    """
    table = job_table_of(model)
    _check_names(table)
    with engine.connect() as conn:
        kind = conn.execute(sql.relkind(table)).scalar()
    if kind is None:
        raise ConfigurationError(f"job table {table.fullname} does not exist: run its migrations first")
    if kind == "p":
        return False
    check = f"{table.name}_live_archived"
    timeout = {"timeout": f"{int(lock_timeout.total_seconds() * 1000)}ms"}
    with engine.begin() as conn:
        conn.execute(text("SELECT set_config('lock_timeout', :timeout, true)"), timeout)
        conn.execute(text(f"ALTER TABLE {_q(conn, table, table.name)} DROP CONSTRAINT IF EXISTS {_id(conn, check)}"))
        conn.execute(text(f"ALTER TABLE {_q(conn, table, table.name)} ADD CONSTRAINT {_id(conn, check)} "
                          "CHECK (archived IS FALSE) NOT VALID"))
    with engine.begin() as conn:
        conn.execute(text(f"ALTER TABLE {_q(conn, table, table.name)} VALIDATE CONSTRAINT {_id(conn, check)}"))
    with engine.begin() as conn:
        conn.execute(text("SELECT set_config('lock_timeout', :timeout, true)"), timeout)
        _swap(conn, table)
    _ensure_days(engine, History(table))
    logger.info("job table %s converted to the partitioned layout", table.fullname)
    return True


DEADLOCK_DETECTED = "40P01"
DAY_ATTEMPTS = 5


def _ensure_days(engine: Engine, history: History) -> None:
    """The day partitions of every state's history, in one transaction, tried again when
    PostgreSQL picks it as a deadlock's victim: creating a partition locks its state's history
    exclusively, one state after another, while a worker's statement that reads the job table,
    now partitioned, takes its shared locks on those histories in an order of its own."""
    for attempt in range(1, DAY_ATTEMPTS + 1):
        try:
            with engine.begin() as conn:
                history.ensure_days(conn)
            return
        except OperationalError as exc:
            if getattr(exc.orig, "sqlstate", None) != DEADLOCK_DETECTED or attempt == DAY_ATTEMPTS:
                raise
            logger.info("creating the history's day partitions met a deadlock with a worker's statement; "
                        "trying again (%d of %d)", attempt + 1, DAY_ATTEMPTS)
            time.sleep(0.1 * attempt)


def _swap(conn: Connection, table: Table) -> None:
    parent, live, history = (_q(conn, table, name) for name in
                             (table.name, sql.live_name(table), sql.history_name(table)))
    conn.execute(text(f"LOCK TABLE {parent} IN ACCESS EXCLUSIVE MODE"))
    next_id = conn.execute(text("SELECT nextval(pg_get_serial_sequence(:table, 'id'))"),
                           {"table": table.fullname}).scalar_one()
    grants = conn.execute(_GRANTS, {"table": table.fullname}).all()
    conn.execute(text(f"ALTER TABLE {parent} ALTER COLUMN id DROP IDENTITY"))
    conn.execute(text(f"ALTER TABLE {parent} RENAME TO {_id(conn, sql.live_name(table))}"))
    conn.execute(text(f"CREATE TABLE {parent} (LIKE {live} INCLUDING DEFAULTS) PARTITION BY LIST (archived)"))
    conn.execute(text(f"ALTER TABLE {parent} ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY "
                      f"(START WITH {int(next_id)})"))
    conn.execute(text(f"ALTER TABLE {parent} ATTACH PARTITION {live} FOR VALUES IN (false)"))
    conn.execute(text(f"CREATE TABLE {history} PARTITION OF {parent} FOR VALUES IN (true) PARTITION BY LIST (status)"))
    conn.execute(text(f"CREATE INDEX {_id(conn, sql.history_name(table) + '_id_idx')} ON {history} (id)"))
    for state in FINISHED:
        name = sql.history_name(table, state)
        conn.execute(text(f"CREATE TABLE {_q(conn, table, name)} PARTITION OF {history} "
                          f"FOR VALUES IN ('{state.value}') PARTITION BY RANGE ({_id(conn, state.finished_at)})"))
        conn.execute(text(f"CREATE INDEX {_id(conn, name + '_at_idx')} ON {_q(conn, table, name)} "
                          f"({_id(conn, state.finished_at)})"))
    for privilege, column, role in grants:  # statements through the parent check the parent's privileges only
        on = f"{privilege} ({_id(conn, column)})" if column else privilege
        conn.execute(text(f"GRANT {on} ON {parent} TO {'PUBLIC' if role is None else _id(conn, role)}"))


# The table's grants, table-wide and per column, but the owner's: (privilege, column or NULL,
# role or NULL for PUBLIC).
_GRANTS = text("""
SELECT a.privilege_type, NULL AS attname, r.rolname
FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee
WHERE c.oid = CAST(:table AS regclass) AND a.grantee <> c.relowner
UNION ALL
SELECT a.privilege_type, t.attname, r.rolname
FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid CROSS JOIN LATERAL aclexplode(t.attacl) a
LEFT JOIN pg_roles r ON r.oid = a.grantee
WHERE t.attrelid = CAST(:table AS regclass) AND t.attacl IS NOT NULL AND a.grantee <> c.relowner
""")


def _check_names(table: Table) -> None:
    longest = sql.day_partition_name(table, max(FINISHED, key=lambda s: len(s.value)), date(2000, 1, 1))
    if len(longest) > MAX_NAME:
        raise ConfigurationError(f"job table name {table.name!r} is too long for the partitioned layout: its "
                                 f"partitions' names ({longest!r}) would pass PostgreSQL's {MAX_NAME} characters")


def _id(conn: Any, name: str) -> str:
    return conn.dialect.identifier_preparer.quote(name)


def _q(conn: Any, table: Table, name: str) -> str:
    return sql.quoted(conn, table, name)
