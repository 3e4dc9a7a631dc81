"""Putting the job table into a known state before each measured run, and reading it back."""

from __future__ import annotations

import time
from contextlib import contextmanager

from . import raw_sql
from .server import Database


def reset(db: Database, *, pending: int = 0, completed: int = 0, options: str | None = None) -> None:
    """Empty the table (and the counters and dependencies tables), optionally set table options, fill it, then
    VACUUM ANALYZE and CHECKPOINT so every run starts from the same clean state."""
    with db.connect(autocommit=True) as conn:
        conn.execute(raw_sql.RESET_TABLE_OPTIONS)
        if options:
            conn.execute(raw_sql.SET_TABLE_OPTIONS % options)
        conn.execute(raw_sql.RESET)
        if conn.execute(raw_sql.COUNTERS_TABLE).fetchone()[0]:
            conn.execute(raw_sql.RESET_COUNTERS)
        if conn.execute(raw_sql.DEPENDENCIES_TABLE).fetchone()[0]:
            conn.execute(raw_sql.RESET_DEPENDENCIES)
        fill(conn, completed=completed, pending=pending)
        settle(conn)


def fill(conn, *, pending: int = 0, completed: int = 0) -> None:
    params = {"queue": raw_sql.QUEUE, "task": raw_sql.TASK}
    if completed:
        conn.execute(raw_sql.FILL_COMPLETED, {**params, "n": completed})
    if pending:
        conn.execute(raw_sql.FILL_PENDING, {**params, "n": pending})


def fill_priorities(conn, *, plain: str, mixed: str, pending: int, priorities: tuple[int, ...]) -> None:
    """`pending` due jobs on each of two queues, rows interleaved: `plain` at the default
    priority, `mixed` at `priorities` in turn."""
    conn.execute(raw_sql.FILL_PENDING_PRIORITIES, {"plain": plain, "mixed": mixed, "task": raw_sql.TASK,
                                                   "n": pending, "priorities": list(priorities)})


def settle(conn) -> None:
    conn.execute(raw_sql.VACUUM_ANALYZE)
    conn.execute(raw_sql.CHECKPOINT)


def counts(db: Database) -> dict[str, int]:
    with db.connect() as conn:
        return dict(conn.execute(raw_sql.COUNT_BY_STATUS).fetchall())


def completed(db: Database) -> int:
    with db.connect() as conn:
        return conn.execute(raw_sql.COUNT_COMPLETED).fetchone()[0]


def sizes(db: Database) -> dict:
    with db.connect() as conn:
        cur = conn.execute(raw_sql.TABLE_SIZES)
        row = cur.fetchone()
        return dict(zip([c.name for c in cur.description], row))


class ServerCounters:
    """Commits and WAL bytes between `start` and `stop` (the whole server, which only this
    benchmark uses). Statistics reach pg_stat_database when a backend commits or exits, so read
    `stop` after the measured processes have exited."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def start(self) -> None:
        self._begin = self._read()

    def stop(self) -> dict:
        with self.db.connect() as conn:
            _wait_for_other_backends_to_exit(conn)
            conn.execute("SELECT pg_stat_clear_snapshot()")
            commits, lsn = conn.execute(raw_sql.SERVER_COUNTERS).fetchone()
            wal = conn.execute(raw_sql.WAL_BYTES, {"end": lsn, "start": self._begin[1]}).fetchone()[0]
        return {"commits": commits - self._begin[0], "wal_bytes": int(wal)}

    def _read(self):
        with self.db.connect() as conn:
            return conn.execute(raw_sql.SERVER_COUNTERS).fetchone()


def _wait_for_other_backends_to_exit(conn, timeout: float = 10.0) -> None:
    """A backend flushes its statistics when it exits; the workers' backends exit just after
    their processes do."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        others = conn.execute(raw_sql.OTHER_BACKENDS).fetchone()[0]
        conn.commit()
        if others == 0:
            return
        time.sleep(0.02)


@contextmanager
def app_queue(db: Database):
    """The benchmark application's Queue (`bench_app.make_queue`: the no-op task the workers
    run), for a section that enqueues or sets limits through the library; disposed after."""
    from .bench_app import make_queue

    queue = make_queue(db.sqlalchemy_url)
    try:
        yield queue
    finally:
        queue.engine.dispose()


def db_clock(db: Database):
    """The database's clock now: what a drain's span starts from."""
    with db.connect() as conn:
        return conn.execute(raw_sql.DB_CLOCK).fetchone()[0]
