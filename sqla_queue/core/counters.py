"""The hot-path event counters: empty claims, retries, recovered leases.

Each is written in the transaction of the event it counts (a retry's counter commits with the
retry), through the executor's statements. `stats` reads them back (`operations`).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import Connection

from ..db.executor import Statements
from ..sql import counters as counter_sql
from ..types import JobStatus

EMPTY_CLAIM_CLASSIFY_INTERVAL = 1.0
"""Seconds between two classifications of empty claims on one queue, per Queue object."""


class EmptyClaimThrottle:
    """At most one classification of empty claims per queue name every `interval` seconds.

    A worker serving a busy queue and an idle one claims the idle one on every round; counting
    each of those would add a round trip, and a write to one hot counter row, per round while
    jobs flow. Empty claims in between are tallied here and added to the next count, under the
    reason found then. The tally is per process: one that exits drops at most `interval`
    seconds of it.
    """

    def __init__(self, interval: float = EMPTY_CLAIM_CLASSIFY_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._state: dict[str, tuple[float, int]] = {}

    def due(self, queue_name: str) -> int | None:
        """The number of empty claims to count now (this one included), or None to tally it."""
        with self._lock:
            now = self._clock()
            last, tallied = self._state.get(queue_name, (None, 0))
            if last is not None and now - last < self.interval:
                self._state[queue_name] = (last, tallied + 1)
                return None
            self._state[queue_name] = (now, 0)
            return tallied + 1


class Counters:
    """Counts events on `statements`' counters table; `throttle` is shared by every copy of a
    Queue (`Queue.on_engine`), so a worker's rounds and its application's claims tally together."""

    def __init__(self, statements: Statements, throttle: EmptyClaimThrottle | None = None) -> None:
        self.statements = statements
        self.throttle = throttle or EmptyClaimThrottle()

    def count_empty_claim(self, conn: Connection, queue_name: str) -> str | None:
        """Classify and count an empty claim on `queue_name` in the claim's own transaction.

        Returns the reason, or None when nothing was pending anywhere (nothing is written) or
        this claim was only tallied (see `EmptyClaimThrottle`).
        """
        return self.count_empty_claims(conn, [queue_name]).get(queue_name)

    def count_empty_claims(self, conn: Connection, queue_names: Iterable[str]) -> dict[str, str]:
        """`count_empty_claim` for the queues one claim found empty, in one statement: the
        reason per queue counted (absent: tallied, or nothing pending anywhere)."""
        due = [(name, events) for name in queue_names if (events := self.throttle.due(name)) is not None]
        if not due:
            return {}
        rows = conn.execute(self.statements.count_empty, {
            "queues": [name for name, _ in due], "events": [events for _, events in due]}).all()
        return {row.queue_name: row.kind for row in rows}

    def count_retry(self, conn: Connection, row: Any) -> None:
        """Count an outcome row that sent its job back to pending (a retry), unless it is the
        replay of a retry already counted."""
        if row is None or getattr(row, "replayed", False) or getattr(row, "status", None) != JobStatus.PENDING.value:
            return
        self._count(conn, counter_sql.RETRIED, [row.queue_name])

    def count_recovered(self, conn: Connection, rows: Iterable[Any]) -> None:
        """Count jobs taken back from expired leases, one upsert per queue they belong to."""
        self._count(conn, counter_sql.LEASE_RECOVERED, [row.queue_name for row in rows])

    def _count(self, conn: Connection, kind: str, queue_names: list[str]) -> None:
        per_queue = Counter(queue_names)
        if per_queue:
            params = [{"queue": name, "kind": kind, "events": n} for name, n in sorted(per_queue.items())]
            conn.execute(self.statements.count_events, params)
