"""Archiving: move finished jobs out of the live partition, into their day of the history.

A `Service` (`sqla_queue.services`) every worker runs on a thread of its own, so the claim loop
never waits for it: `Archiver.run_once()` moves what finished since the last pass (in batches of
`ARCHIVE_BATCH`, each its own transaction, up to `ARCHIVE_MAX_BATCHES` per state)
and keeps the next days' partitions ready. On a job table that is not partitioned it only looks,
every `RECHECK` seconds, whether someone converted it (docs/explanation/storage.md).
Several workers archive side by side: SKIP LOCKED splits the rows.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import cached_property
from typing import Any

from sqlalchemy import Connection, Table, func, select, text

from ..core import Core
from ..sql import history as sql
from ..states import FINISHED, State

logger = logging.getLogger("sqla_queue.maintenance")

DAYS_AHEAD = 2
"""Day partitions kept ready beyond today, so a finished job always has its day."""
ARCHIVE_BATCH = 5_000
ARCHIVE_INTERVAL = 1.0
ARCHIVE_MAX_BATCHES = 20
RECHECK = 60.0
"""Seconds between a worker's looks at whether its table is partitioned (it may be converted
while the worker runs)."""
DEFAULT_LOCK_TIMEOUT = timedelta(seconds=5)
FAILURE_PAUSE = 30.0
"""Seconds a worker's archiver waits after a pass that failed (the database unreachable)."""
DAYS_EVERY = 600.0
"""Seconds between a worker's checks that the days ahead have their partitions."""


@dataclass(frozen=True)
class ArchiveResult:
    archived: int = 0
    created: tuple[str, ...] = ()


class History:
    """The upkeep of one job table's history partitions (a no-op while the table is plain)."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self._partitioned: bool | None = None
        self._checked_at = float("-inf")
        self._days_ready: date | None = None

    def partitioned(self, conn: Connection, *, fresh: bool = False) -> bool:
        """Whether the table is partitioned: from the catalog when `fresh` or once `RECHECK`
        seconds have passed since the last look (a look that failed counts: no retry storm
        while the database is unreachable), from memory otherwise."""
        if fresh or self.recheck_due():
            self._checked_at = time.monotonic()
            self._partitioned = conn.execute(sql.relkind(self.table)).scalar() == "p"
        return bool(self._partitioned)

    def assume_plain(self) -> None:
        """Take the table for plain until the next look, `RECHECK` seconds from now."""
        self._partitioned, self._checked_at = False, time.monotonic()

    def recheck_due(self) -> bool:
        """Whether `partitioned` would look at the catalog again (else it answers from memory)."""
        return self._partitioned is None or time.monotonic() - self._checked_at >= RECHECK

    @property
    def known_plain(self) -> bool:
        return self._partitioned is False and not self.recheck_due()

    def ensure_days(self, conn: Connection, today: date | None = None) -> tuple[str, ...]:
        """Yesterday's, today's and the next `DAYS_AHEAD` days' partitions of every state's
        history, those missing created (once a day at most per process)."""
        today = today or _db_today(conn)
        if self._days_ready == today:
            return ()
        existing = set(self.partitions(conn))
        created = []
        for state in FINISHED:
            for offset in range(-1, DAYS_AHEAD + 1):
                day = today + timedelta(days=offset)
                name = sql.day_partition_name(self.table, state, day)
                if name not in existing:
                    conn.execute(sql.create_day_partition(conn, self.table, state, day))
                    created.append(name)
        self._days_ready = today
        return tuple(created)

    def partitions(self, conn: Connection, state: State | None = None) -> list[str]:
        """The day (and any other) partitions of `state`'s history, or of every state's."""
        by_state = self._partitions_by_state(conn)
        return [name for s in ([state] if state else FINISHED) for name in by_state[s]]

    def spans(self, conn: Connection) -> dict[State, tuple[datetime, datetime]]:
        """Each state's span from its first day partition to past its last (states without
        one left out): what the archiver may move."""
        out = {}
        for state, names in self._partitions_by_state(conn).items():
            days = sorted(day for day in map(sql.day_of, names) if day is not None)
            if days:
                out[state] = (_midnight(days[0]), _midnight(days[-1] + timedelta(days=1)))
        return out

    def _partitions_by_state(self, conn: Connection) -> dict[State, list[str]]:
        parents = {sql.history_name(self.table, state): state for state in FINISHED}
        out: dict[State, list[str]] = {state: [] for state in FINISHED}
        for parent, name in conn.execute(sql.partitions_of(self.table), {"parents": list(parents)}):
            out[parents[parent]].append(name)
        return out

    def archive(self, conn_factory: Any) -> int:
        """Batches of each state until caught up, or `ARCHIVE_MAX_BATCHES` each; each batch a
        transaction from ``conn_factory()`` (a context manager)."""
        with conn_factory() as conn:
            first = self.archive_first(conn)
        return self.archive_rest(conn_factory, first)

    def archive_first(self, conn: Connection) -> dict[State, tuple[tuple[datetime, datetime], int]]:
        """The day partitions read afresh and one batch of each state, on `conn`: so an idle
        pass costs a statement per state. Each state's span and how many it moved."""
        return {state: (span, self._archive_batch(conn, state, span)) for state, span in self.spans(conn).items()}

    def archive_rest(self, conn_factory: Any, first: dict[State, tuple[tuple[datetime, datetime], int]]) -> int:
        """The further batches of the states whose first batch was full."""
        moved = sum(n for _, n in first.values())
        for state, (span, n) in first.items():
            rounds = 1
            while n >= ARCHIVE_BATCH and rounds < ARCHIVE_MAX_BATCHES:
                with conn_factory() as conn:
                    n = self._archive_batch(conn, state, span)
                moved, rounds = moved + n, rounds + 1
        return moved

    @cached_property
    def _archive(self) -> dict[State, Any]:
        """The archive statements, built on first use: a worker on a plain table never needs them."""
        return {state: sql.archive_finished(self.table, state) for state in FINISHED}

    def _archive_batch(self, conn: Connection, state: State, span: tuple[datetime, datetime]) -> int:
        params = {"since": span[0], "until": span[1], "limit": ARCHIVE_BATCH}
        return int(conn.execute(self._archive[state], params).scalar_one())

    def expired(self, conn: Connection, state: State, older_than: timedelta) -> list[str]:
        """`state`'s day partitions whose whole day finished more than `older_than` ago, that
        no active job depends on: retention drops them."""
        cutoff = conn.execute(select(func.now())).scalar_one() - older_than
        out = []
        for name in self.partitions(conn, state):
            day = sql.day_of(name)
            if day is not None and _midnight(day + timedelta(days=1)) <= cutoff \
                    and not conn.execute(sql.partition_needed(self.table, name)).scalar():
                out.append(name)
        return out

    def drop(self, conn: Connection, name: str) -> int:
        """Drop the history partition `name` (bounded by the lock timeout); how many jobs it held."""
        conn.execute(text("SELECT set_config('lock_timeout', :timeout, true)"),
                     {"timeout": f"{int(DEFAULT_LOCK_TIMEOUT.total_seconds() * 1000)}ms"})
        count = conn.execute(sql.count_rows(self.table, name)).scalar_one()
        conn.execute(sql.drop_partition(conn, self.table, name))
        return int(count)


class Archiver:
    """Archives `core`'s job table every `interval` seconds while it is partitioned."""

    def __init__(self, core: Core, *, interval: float = ARCHIVE_INTERVAL) -> None:
        self.executor = core.executor
        self.history = History(core.executor.table)
        self.interval = interval
        self._next_run = 0.0
        self._days_due = 0.0
        # A worker's first look at the catalog waits a minute: nothing at start-up, when the
        # claim loop and the lease keeper take their connections.
        self.history.assume_plain()

    def run_once(self, *, fresh: bool = True) -> ArchiveResult:
        """One pass: in one transaction, the catalog check (the periodic pass, not `fresh`,
        makes it once a minute and does nothing on a table known to be plain), the days ahead
        (every `DAYS_EVERY` seconds) and the first batch of each state; then further batches."""
        if not fresh and self.history.known_plain:
            return ArchiveResult()
        created: tuple[str, ...] = ()
        with self.executor.transaction() as conn:
            if not self.history.partitioned(conn, fresh=fresh):
                return ArchiveResult()
            if time.monotonic() >= self._days_due:
                created = self.history.ensure_days(conn)
                self._days_due = time.monotonic() + DAYS_EVERY
            first = self.history.archive_first(conn)
        return ArchiveResult(archived=self.history.archive_rest(self.executor.transaction, first), created=created)

    def next_due(self) -> float:
        return self._next_run

    def run_if_due(self) -> ArchiveResult | None:
        now = time.monotonic()
        if now < self._next_run:
            return None
        self._next_run = now + self.interval
        try:
            result = self.run_once(fresh=False)
        except Exception:
            self._next_run = now + FAILURE_PAUSE  # one logged failure, not one a second
            raise
        if result.created:
            logger.info("created history partitions %s of %s", ", ".join(result.created),
                        self.executor.table.name)
        return result


def _db_today(conn: Connection) -> date:
    return conn.execute(select(func.now())).scalar_one().astimezone(UTC).date()


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)
