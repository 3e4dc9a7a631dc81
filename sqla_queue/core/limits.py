"""Flow control: a queue's limits, stored per queue in the database (`Queue.set_limits`), and the
claim that enforces them (docs/how-to/limits.md, docs/explanation/limits.md).

A limited claim is one short transaction: lock the queue's limits row
(`sql.limits.lock_limits_to_claim`, whose commit does not wait for its WAL flush), then claim
with `sql.claim.limited` under a snapshot that sees every earlier claim; with psycopg both
statements and the commit go in one round trip (`Limits.claim`). Which of a
worker's queues are limited is read at most every `REFRESH_EVERY` seconds (`LimitedQueues`), so
an unlimited queue's claim costs nothing more than before limits existed.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
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


RATE_AHEAD = 0.25
"""Seconds of a rate's tokens a worker's claim may take before the bucket holds them: the jobs
they pay for wait in the worker until their token is due, so a worker that claims up to this
late (a busy machine, a slow round trip) costs the rate no starts, and no second sees more than
the rate plus its burst. `Queue.claim` takes none early: its caller runs what it gets at once."""

THROTTLED_RETRY = 0.01
"""Seconds before a worker claims again from a queue whose limits held due jobs back: a bucket
refills continuously and other workers' completions free slots, neither of which notifies."""


@dataclass(frozen=True)
class LimitedClaim:
    """What a limited claim got: the jobs, whether a limit held due jobs back, and when to claim
    again if it did (seconds)."""

    jobs: list[ClaimedJob]
    throttled: bool
    retry_after: float = THROTTLED_RETRY


class LimitedQueues:
    """The queues that have limits, and their limits, read again when older than `REFRESH_EVERY`.

    A role without ``SELECT`` on the limits table (granted before limits existed), or a schema
    before revision sqlaq_0011 (no such table), sees no limited queue: its claims stay the
    unlimited claim and it logs a warning (once), rather than a worker stopping on its first
    claim after an upgrade (docs/how-to/database-roles.md).
    """

    def __init__(self, read: Any) -> None:
        self._read = read
        self._limits: dict[str, QueueLimits] = {}
        self._read_at = float("-inf")
        self._lock = threading.Lock()
        self._warned = False

    def names(self) -> frozenset[str]:
        """The names, read again first when older than `REFRESH_EVERY`."""
        self.refresh_if_stale()
        return frozenset(self._limits)

    def cached(self, name: str) -> QueueLimits | None:
        """`name`'s limits as last read (None: unlimited then): what a claim is built for."""
        return self._limits.get(name)

    def known(self) -> frozenset[str]:
        """The names as last read (read now if never): a worker's round uses these and refreshes
        them after its claim (`refresh_if_stale`), so a wake-up's claim never waits for the read."""
        if self._read_at == float("-inf"):
            self.refresh_if_stale()
        return frozenset(self._limits)

    def refresh_if_stale(self) -> None:
        if time.monotonic() - self._read_at >= REFRESH_EVERY:
            with self._lock:
                if time.monotonic() - self._read_at >= REFRESH_EVERY:
                    self._limits = self._read_limits()
                    self._read_at = time.monotonic()

    def _read_limits(self) -> dict[str, QueueLimits]:
        try:
            return dict(self._read())
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
            return {}

    def forget(self) -> None:
        """Read again on next use (this process just changed a queue's limits)."""
        self._read_at = float("-inf")


class Limits:
    """Store, read and enforce queue limits on `executor`'s table."""

    def __init__(self, executor: Executor, counters: Counters) -> None:
        self.executor = executor
        self.statements = executor.statements
        self.counters = counters
        self.limited = LimitedQueues(self.all)

    # -- storing -------------------------------------------------------------------------

    def set(self, queue_name: str, *, concurrency: Any = _UNSET, group_concurrency: Any = _UNSET,
            rate: Any = _UNSET, group_rate: Any = _UNSET, fair: Any = _UNSET) -> QueueLimits | None:
        """Change the limits named (None: remove that one), keep the others; all of them None:
        the queue is unlimited again (its row is deleted). Every value is checked before
        anything is written. The queue's row is locked (made first if missing) before it is
        read, so two callers changing different limits at once both keep their change."""
        name = _validate.name(queue_name, "queue")
        given = {"concurrency": concurrency, "group_concurrency": group_concurrency, "rate": rate,
                 "group_rate": group_rate, "fair": fair}
        changes = {key: _checked(key, value) for key, value in given.items() if value is not _UNSET}
        params = {"queue": name}
        with self.executor.transaction() as conn:
            conn.execute(self.statements.ensure_limits, params)
            row = conn.execute(self.statements.lock_limits, params).first()
            wanted = replace(QueueLimits.from_row(row), **changes)
            self._store(conn, wanted)
            if wanted.fair:
                self._give_turns(conn, params)
        self.limited.forget()
        return None if wanted.unlimited else wanted

    def _give_turns(self, conn: Any, params: dict[str, Any]) -> None:
        """The queue's pending jobs without a turn get theirs (it was just made fair)."""
        bases = conn.execute(self.statements.turn_bases, params).all()
        if bases:
            conn.execute(self.statements.tag_pending_turns, {
                **params, "keys": [row.group_key for row in bases], "bases": [row.base for row in bases]})

    def clear(self, queue_name: str) -> None:
        """Remove every limit of `queue_name`."""
        with self.executor.transaction() as conn:
            self._store(conn, QueueLimits(_validate.name(queue_name, "queue")))
        self.limited.forget()

    def _store(self, conn: Any, limits: QueueLimits) -> None:
        params = {"queue": limits.queue}
        conn.execute(self.statements.clear_group_rates, params)
        if limits.unlimited:
            conn.execute(self.statements.clear_limits, params)
        else:
            conn.execute(self.statements.set_limits, {**params, **_columns(limits)})

    # -- reading -------------------------------------------------------------------------

    def all(self) -> dict[str, QueueLimits]:
        """Every limited queue's limits, by queue name. A worker reads them from its claim loop
        (`LimitedQueues.known`), on the connection its rounds keep rather than one more from
        the pool (the first read came before the first claim); anywhere else this is one
        autocommit statement on a pooled connection."""
        with self.executor.round_connection() as conn:
            rows = conn.execute(self.statements.all_limits).all()
        return {row.queue_name: QueueLimits.from_row(row) for row in rows}

    def get(self, queue_name: str) -> QueueLimits | None:
        return self.all().get(queue_name)

    # -- claiming ------------------------------------------------------------------------

    def claim(self, queue: str, worker_id: str, limit: int, lease: timedelta | float = DEFAULT_LEASE,
              tasks: Sequence[str] | None = None, ahead: float = 0.0) -> LimitedClaim:
        """Claim up to `limit` jobs of `queue` within its limits (none, asking to be called again
        at once, when its limits were just removed); a throttled claim is counted for the health
        signals by the claim itself.

        One round trip with psycopg: the lock, the claim built for the limits this process last
        read and the commit, sent together (`Executor.one_round_trip`). If those limits are no
        longer the queue's, that claim took nothing, and the limits are read under the lock
        and the claim made again (`_claim_under_lock`). A worker completes its finished jobs
        before, in a transaction of its own: a claim's commit does not wait for its WAL flush
        (`sql.limits.lock_limits_to_claim`), an outcome's does.

        `ahead`: seconds of a rate's tokens the claim may take early (`RATE_AHEAD` for a worker,
        which starts each such job when its token is due, `ClaimedJob.start_after`; 0 for a
        caller that runs what it claims at once)."""
        params: dict[str, Any] = {
            "queue": queue, "worker_id": worker_id, "limit": limit, "token": secrets.token_urlsafe(24),
            "lease": _validate.duration(lease, "lease", positive=True), "tasks": None if tasks is None else list(tasks),
            "ahead": ahead,
        }
        known = self.limited.cached(queue)
        if known is not None:
            steps = self.executor.one_round_trip(
                lambda fast: _claim_steps(fast, known, {**params, **_claim_params(known)}))
            if steps is not None:
                rows = steps[-1]
                if not rows[0].stale:
                    return _claimed(rows, known)
                self.limited.forget()
        return self._claim_under_lock(queue, params)

    def compile_claim(self, queue: str) -> bool:
        """Compile now the statements a claim of `queue` will run with its current limits (a
        process compiles each once, on first use: ~25 ms for a grouped claim). False, compiling
        nothing, for an unlimited queue or without the driver fast path."""
        known = self.limited.cached(queue) if queue in self.limited.known() else None
        if known is None:
            return False
        return self.executor.compiled(lambda fast: _claim_steps(fast, known, {"queue": queue})) is not None

    def _claim_under_lock(self, queue: str, params: dict[str, Any]) -> LimitedClaim:
        """The claim in three round trips: lock the limits row and read it, claim, commit."""
        with self.executor.transaction() as conn:
            row = conn.execute(self.statements.claim_lock, params).first()
            if row is None:  # its limits were just removed: the next claim is the unlimited one
                self.limited.forget()
                return LimitedClaim([], False, 0.0)
            found = QueueLimits.from_row(row)
            statement = self.statements.fair_claim if _fair_only(found) else \
                self.statements.limited_claim(_grouped(found), found.fair)
            rows = conn.execute(statement, {**params, **_claim_params(found)}).all()
        return _claimed(rows, found)


def _claimed(rows: list[Any], limits: QueueLimits) -> LimitedClaim:
    jobs = sorted((_claimed_job(r) for r in rows if r.id is not None), key=lambda j: j.id)
    return LimitedClaim(jobs, bool(rows and rows[0].throttled), _retry_after(limits))


def _claimed_job(row: Any) -> ClaimedJob:
    job = ClaimedJob.from_row(row)
    return replace(job, start_after=row.start_after) if row.start_after else job


def _retry_after(limits: QueueLimits) -> float:
    """Half the time a rate's bucket takes to fill (so a claim finds it about half full, never
    overflowing), at most `THROTTLED_RETRY`."""
    refills = [rate.burst / rate.per_second / 2 for rate in (limits.rate, limits.group_rate) if rate is not None]
    return min([THROTTLED_RETRY, *refills])


def _checked(key: str, value: Any) -> Any:
    """`value` for limit `key`, checked (None: remove the limit; for `fair`, False)."""
    if value is None:
        return False if key == "fair" else None
    if key in ("rate", "group_rate"):
        return parse_rate(value, key)
    if key == "fair":
        if not isinstance(value, bool):
            raise _validate.InvalidInputError(f"fair must be True, False or None, got {value!r}")
        return value
    return limit_count(value, key)


def _claim_steps(fast: Any, limits: QueueLimits, params: dict[str, Any]) -> list[tuple[Any, dict[str, Any]]]:
    """The claim's statements for `limits`: a queue that is only fair claims in turn order
    without the lock (`sql.claim.fair`); any cap or rate takes the lock, then the limited claim."""
    if _fair_only(limits):
        return [(fast.fair_claim, params)]
    return [(fast.claim_lock, {"queue": params["queue"]}), (fast.limited_claim(_grouped(limits), limits.fair), params)]


def _fair_only(limits: QueueLimits) -> bool:
    """Fair, with nothing to count: no claim can overshoot, so claims need not take turns."""
    return limits.fair and limits.concurrency is None and limits.group_concurrency is None \
        and limits.rate is None and limits.group_rate is None


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


def _claim_params(limits: QueueLimits) -> dict[str, Any]:
    """The claim's parameters for `limits`: its columns (which the claim checks are still the
    queue's) and the values the statement computes with."""
    rate, group_rate = limits.rate, limits.group_rate
    return {
        **{f"known_{name}": value for name, value in _columns(limits).items()},
        "max_running": limits.concurrency, "max_running_per_key": limits.group_concurrency,
        "per_second": None if rate is None else rate.per_second,
        "burst": None if rate is None else float(rate.burst),
        "group_per_second": None if group_rate is None else group_rate.per_second,
        "group_burst": None if group_rate is None else float(group_rate.burst),
    }
