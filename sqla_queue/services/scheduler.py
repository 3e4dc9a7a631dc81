"""The `Scheduler` every worker runs in its claim loop: it enqueues the due ticks of the
schedules declared on a queue (`sqla_queue.core.schedules`), each tick once across every
worker.

A `Service` (`sqla_queue.services`): `run_if_due()` is the claim loop's pass; `fire_tick`
enqueues one schedule's due ticks in a transaction the schedule's row decides.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from datetime import timezone as dt_timezone

from ..core import Core
from ..core.schedules import MAX_BACKFILL, Schedule
from ..errors import DatabaseError, SqlaQueueError

logger = logging.getLogger("sqla_queue.scheduling")


class Scheduler:
    """Enqueues the due ticks of `core`'s schedules; one per worker.

    Between ticks it costs a clock read: it knows when each schedule's next tick comes (local
    clock) and touches the database only then. A tick is enqueued by `fire_tick`, whose
    transaction the schedule's row decides. Without backfill, ticks that came due before this
    scheduler started (a worker's downtime) are never enqueued by it; with backfill, a pass
    enqueues every tick since the schedule's last one (at most `MAX_BACKFILL`).
    """

    def __init__(self, core: Core, *, clock: Callable[[], datetime] | None = None) -> None:
        self.core = core
        self._clock = clock or _utc_now
        self._started: datetime | None = None
        self._due: dict[str, datetime] = {}
        self._queues: frozenset[str] | None = None

    def serve(self, queues: Iterable[str]) -> None:
        """Enqueue only the ticks of schedules whose jobs go to `queues` (a worker's): a tick
        no worker of this deployment would claim is left to one that serves its queue."""
        self._queues = frozenset(queues)

    def schedules(self) -> list[Schedule]:
        """The schedules this scheduler enqueues ticks of (all, until `serve` narrows them)."""
        schedules = self.core.schedules.all()
        if self._queues is None:
            return schedules
        return [schedule for schedule in schedules if self.core.schedule_queue(schedule) in self._queues]

    def run_if_due(self) -> int:
        """Enqueue the ticks that came due since the last pass; returns how many this worker
        enqueued (ticks another worker got first are not counted)."""
        now = self._clock()
        enqueued = 0
        for schedule in self.schedules():
            if self._due_of(schedule, now) <= now:
                enqueued += self._pass(schedule, now)
                self._due[schedule.name] = schedule.next_tick(now)
        return enqueued

    def run_once(self) -> int:
        """The pass, whether due or not."""
        return self.run_if_due()

    def next_due(self) -> float | None:
        """`seconds_until_due` on the monotonic clock."""
        seconds = self.seconds_until_due()
        return None if seconds is None else time.monotonic() + seconds

    def seconds_until_due(self) -> float | None:
        """Seconds until the next tick of any schedule; None without schedules."""
        schedules = self.schedules()
        if not schedules:
            return None
        now = self._clock()
        soonest = min(self._due_of(schedule, now) for schedule in schedules)
        return max(0.0, (soonest - now).total_seconds())

    def _due_of(self, schedule: Schedule, now: datetime) -> datetime:
        """When `schedule` next comes due; at first, its first tick after this scheduler's
        first look (which is when it started)."""
        if self._started is None:
            self._started = now
        due = self._due.get(schedule.name)
        if due is None:
            due = self._due[schedule.name] = schedule.next_tick(self._started)
        return due

    def _pass(self, schedule: Schedule, now: datetime) -> int:
        """One schedule's due ticks. A database error propagates (the claim loop backs off and
        the tick is tried again); anything else (a job the enqueue refuses: a plugin, a payload
        over a limit lowered since) is logged and the tick skipped: a schedule must not stop the
        worker's claims."""
        try:
            return fire_tick(self.core, schedule, now, not_before=self._started or now)
        except DatabaseError:
            raise
        except SqlaQueueError as exc:
            logger.error("schedule %r: could not enqueue its tick: %s", schedule.name, exc)
        except Exception:
            logger.exception("schedule %r: could not enqueue its tick", schedule.name)
        return 0


def fire_tick(core: Core, schedule: Schedule, now: datetime, *, not_before: datetime) -> int:
    """Enqueue `schedule`'s due ticks as of `now`, once across every worker; returns how many
    jobs this call inserted.

    One transaction: without backfill, the latest tick in ``(not_before, now]``; with backfill,
    the ticks since the schedule's last one (its row locked while they are counted; the first
    time, only the latest, as without). The conditional upsert of the latest tick then decides:
    it returns the row only if the stored tick was older, and only then are the jobs inserted,
    unless the schedule says `skip_if_pending` and a job of an earlier tick still waits: then
    the ticks are passed over (the row moved all the same, so they are not backfilled later).
    A racing worker's upsert waits for this transaction and then finds its tick taken.
    """
    statements = core.executor.statements
    with core.executor.transaction() as conn:
        after = not_before
        limit = 1
        if schedule.backfill:
            last = conn.execute(statements.schedule_last_tick_locked, {"name": schedule.name}).scalar_one_or_none()
            if last is not None:
                after, limit = last, MAX_BACKFILL
        ticks = schedule.due_ticks(after, now, limit)
        if not ticks:
            return 0
        advanced = conn.execute(statements.advance_schedule, {"name": schedule.name, "tick": ticks[-1]}).first()
        if advanced is None:
            return 0
        if schedule.skip_if_pending and _tick_pending(core, schedule, conn):
            logger.info("schedule %r: skipped the tick of %s, an earlier tick's job is still pending on queue %r",
                        schedule.name, ticks[-1], core.schedule_queue(schedule))
            return 0
        for tick in ticks:
            core.enqueue_tick(schedule, tick, conn)
    if len(ticks) > 1:
        logger.info("schedule %r: enqueued %d missed ticks, the last for %s", schedule.name, len(ticks), ticks[-1])
    else:
        logger.debug("schedule %r: enqueued the tick of %s", schedule.name, ticks[0])
    return len(ticks)


def _tick_pending(core: Core, schedule: Schedule, conn) -> bool:
    """A job of an earlier tick of `schedule` (its task and payload) waits on its queue (asked
    after the schedule's row moved, so racing workers ask one at a time)."""
    params = {"queue": core.schedule_queue(schedule), "task": schedule.task, "payload": schedule.payload}
    return bool(conn.execute(core.executor.statements.schedule_tick_pending, params).scalar())


def last_ticks(core: Core) -> dict[str, datetime]:
    """The last tick enqueued of each of `core`'s schedules that has run (the CLI's view)."""
    names = [s.name for s in core.schedules.all()]
    if not names:
        return {}
    with core.executor.connection() as conn:
        rows = conn.execute(core.executor.statements.schedule_last_ticks, {"names": names}).all()
    return {row.name: row.last_tick for row in rows}


def _utc_now() -> datetime:
    return datetime.now(dt_timezone.utc)
