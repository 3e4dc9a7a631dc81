"""Flow control: a queue's limits, stored per queue in the database (`Queue.set_limits`), and the
claim that enforces them (docs/how-to/limits.md, docs/explanation/limits.md).

A limited claim is one short transaction: lock the queue's limits row (`sql.limits.lock_limits`),
then claim with `sql.claim.limited` under a snapshot that sees every earlier claim. Which of a
worker's queues are limited is read at most every `REFRESH_EVERY` seconds (`LimitedQueues`), so
an unlimited queue's claim costs nothing more than before limits existed.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .. import _validate
from ..db.executor import Executor
from ..errors import DatabaseError, PermissionDeniedError
from ..queue_state import QueueLimits, limit_count, parse_rate
from ..types import DEFAULT_LEASE, ClaimedJob
from .counters import Counters

REFRESH_EVERY = 2.0
"""Seconds a process trusts its list of limited queues: a queue limited (or no longer limited)
elsewhere takes the limited claim in this process within about this long. Limits changed on a
queue that was limited already apply at its next claim (the claim reads them)."""

_UNSET: Any = object()
UNDEFINED_TABLE = "42P01"
logger = logging.getLogger("sqla_queue.limits")


THROTTLED_RETRY = 0.01
"""Seconds before a worker claims again from a queue whose limits held due jobs back: a bucket
refills continuously and other workers' completions free slots, neither of which notifies."""


@dataclass(frozen=True)
class LimitedClaim:
    """What a limited claim got: the jobs, whether a limit held due jobs back, and when to
    claim again if it did (seconds)."""

    jobs: list[ClaimedJob]
    throttled: bool
    retry_after: float = THROTTLED_RETRY


class LimitedQueues:
    """The names of the queues that have limits, read again when older than `REFRESH_EVERY`.

    A role without ``SELECT`` on the limits table (granted before limits existed), or a schema
    before revision sqlaq_0011 (no such table), sees no limited queue: its claims stay the
    unlimited claim and it logs a warning (once), rather than a worker stopping on its first
    claim after an upgrade (docs/how-to/database-roles.md).
    """

    def __init__(self, read: Any) -> None:
        self._read = read
        self._names: frozenset[str] = frozenset()
        self._read_at = float("-inf")
        self._lock = threading.Lock()
        self._warned = False

    def names(self) -> frozenset[str]:
        """The names, read again first when older than `REFRESH_EVERY`."""
        self.refresh_if_stale()
        return self._names

    def known(self) -> frozenset[str]:
        """The names as last read (read now if never): a worker's round uses these and refreshes
        them after its claim (`refresh_if_stale`), so a wake-up's claim never waits for the read."""
        if self._read_at == float("-inf"):
            self.refresh_if_stale()
        return self._names

    def refresh_if_stale(self) -> None:
        if time.monotonic() - self._read_at >= REFRESH_EVERY:
            with self._lock:
                if time.monotonic() - self._read_at >= REFRESH_EVERY:
                    self._names = self._read_names()
                    self._read_at = time.monotonic()

    def _read_names(self) -> frozenset[str]:
        try:
            return frozenset(self._read())
        except DatabaseError as exc:
            missing = getattr(getattr(exc, "orig", None), "sqlstate", None) == UNDEFINED_TABLE
            if not (missing or isinstance(exc, PermissionDeniedError)):
                raise
            if not self._warned:
                self._warned = True
                fix = ("run `sqla-queue db upgrade`" if missing else
                       "grant SELECT, UPDATE on the limits table: docs/how-to/database-roles.md")
                logger.warning("cannot read queue limits, so none are enforced by this process's claims "
                               "(%s): %s", fix, exc)
            return frozenset()

    def forget(self) -> None:
        """Read again on next use (this process just changed a queue's limits)."""
        self._read_at = float("-inf")


class Limits:
    """Store, read and enforce queue limits on `executor`'s table."""

    def __init__(self, executor: Executor, counters: Counters) -> None:
        self.executor = executor
        self.statements = executor.statements
        self.counters = counters
        self.limited = LimitedQueues(self._limited_names)

    # -- storing -------------------------------------------------------------------------

    def set(self, queue_name: str, *, concurrency: Any = _UNSET, group_concurrency: Any = _UNSET,
            rate: Any = _UNSET, group_rate: Any = _UNSET, fair: Any = _UNSET) -> QueueLimits | None:
        """Change the limits named (None: remove that one), keep the others; all of them None:
        the queue is unlimited again (its row is deleted). Every value is checked before
        anything is written."""
        name = _validate.name(queue_name, "queue")
        current = self.get(name) or QueueLimits(name)
        wanted = QueueLimits(
            queue=name,
            concurrency=_changed(current.concurrency, concurrency, lambda v: limit_count(v, "concurrency")),
            group_concurrency=_changed(current.group_concurrency, group_concurrency,
                                       lambda v: limit_count(v, "group_concurrency")),
            rate=_changed(current.rate, rate, lambda v: parse_rate(v, "rate")),
            group_rate=_changed(current.group_rate, group_rate, lambda v: parse_rate(v, "group_rate")),
            fair=bool(_changed(current.fair, fair, _fair)),
        )
        self._store(wanted)
        return None if wanted.unlimited else wanted

    def clear(self, queue_name: str) -> None:
        """Remove every limit of `queue_name`."""
        self._store(QueueLimits(_validate.name(queue_name, "queue")))

    def _store(self, limits: QueueLimits) -> None:
        params = {"queue": limits.queue}
        with self.executor.transaction() as conn:
            conn.execute(self.statements.clear_group_rates, params)
            if limits.unlimited:
                conn.execute(self.statements.clear_limits, params)
            else:
                conn.execute(self.statements.set_limits, {**params, **_columns(limits)})
        self.limited.forget()

    # -- reading -------------------------------------------------------------------------

    def all(self) -> dict[str, QueueLimits]:
        """Every limited queue's limits, by queue name."""
        with self.executor.connection() as conn:
            rows = conn.execute(self.statements.all_limits).all()
        return {row.queue_name: QueueLimits.from_row(row) for row in rows}

    def get(self, queue_name: str) -> QueueLimits | None:
        return self.all().get(queue_name)

    def _limited_names(self) -> list[str]:
        with self.executor.connection() as conn:
            return list(conn.execute(self.statements.limited_queue_names).scalars())

    # -- claiming ------------------------------------------------------------------------

    def claim(self, queue: str, worker_id: str, limit: int, lease: timedelta | float = DEFAULT_LEASE,
              tasks: Sequence[str] | None = None) -> LimitedClaim:
        """Claim up to `limit` jobs of `queue` within its limits (none, asking to be called again
        at once, when its limits were just removed); a throttled claim is counted for the health
        signals in the same transaction."""
        params: dict[str, Any] = {
            "queue": queue, "worker_id": worker_id, "limit": limit, "token": secrets.token_urlsafe(24),
            "lease": _validate.duration(lease, "lease", positive=True), "tasks": None if tasks is None else list(tasks),
        }
        with self.executor.transaction() as conn:
            row = conn.execute(self.statements.lock_limits, params).first()
            if row is None:  # its limits were just removed: the next claim is the unlimited one
                self.limited.forget()
                return LimitedClaim([], False, 0.0)
            found = QueueLimits.from_row(row)
            statement = self.statements.limited_claim(_grouped(found), found.fair)
            rows = conn.execute(statement, {**params, **_claim_params(found, row.last_group_key)}).all()
            throttled = bool(rows and rows[0].throttled)
            if throttled:
                self.counters.count_throttled(conn, queue)
        jobs = sorted((ClaimedJob.from_row(r) for r in rows if r.id is not None), key=lambda j: j.id)
        return LimitedClaim(jobs, throttled, _retry_after(found))


def _retry_after(limits: QueueLimits) -> float:
    """Half the time a rate's bucket takes to fill (so a claim finds it about half full, never
    overflowing), at most `THROTTLED_RETRY`."""
    refills = [rate.burst / rate.per_second / 2 for rate in (limits.rate, limits.group_rate) if rate is not None]
    return min([THROTTLED_RETRY, *refills])


def _changed(current: Any, given: Any, check: Any) -> Any:
    if given is _UNSET:
        return current
    return None if given is None else check(given)


def _fair(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _validate.InvalidInputError(f"fair must be True, False or None, got {value!r}")
    return value


def _grouped(limits: QueueLimits) -> bool:
    return limits.group_concurrency is not None or limits.group_rate is not None or limits.fair


def _columns(limits: QueueLimits) -> dict[str, Any]:
    return {
        "concurrency": limits.concurrency, "group_concurrency": limits.group_concurrency,
        "rate": None if limits.rate is None else limits.rate.count,
        "rate_period": None if limits.rate is None else limits.rate.period,
        "group_rate": None if limits.group_rate is None else limits.group_rate.count,
        "group_rate_period": None if limits.group_rate is None else limits.group_rate.period,
        "fair": limits.fair,
    }


def _claim_params(limits: QueueLimits, cursor: str | None) -> dict[str, Any]:
    rate, group_rate = limits.rate, limits.group_rate
    return {
        "max_running": limits.concurrency, "max_running_per_key": limits.group_concurrency, "cursor": cursor,
        "per_second": None if rate is None else rate.per_second,
        "burst": None if rate is None else float(rate.burst),
        "group_per_second": None if group_rate is None else group_rate.per_second,
        "group_burst": None if group_rate is None else float(group_rate.burst),
    }
