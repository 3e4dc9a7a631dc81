"""Periodic jobs: schedules declared on a queue (`Queue.periodic`); the `Scheduler` every worker
runs in its claim loop is `sqla_queue.services.scheduler`.

A schedule's ticks are instants: an interval schedule's are multiples of its interval since
the Unix epoch, a cron schedule's are croniter's matches of the expression in the schedule's
time zone. Every worker computes the same ticks, and any of them may enqueue one: the
schedule's row in ``<table>_schedules`` decides which (`sql.schedules.advance_schedule`, in the
transaction that inserts the job), so each tick is enqueued once however many workers race it
or restart (docs/how-to/schedule-jobs.md).
"""

from __future__ import annotations

import functools
import json
import zoneinfo
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from datetime import timezone as dt_timezone
from typing import Any, TypedDict

from .. import _validate
from .._tasks import Task, TaskRegistry
from ..errors import ConfigurationError, SqlaQueueError, UnknownTaskError

MAX_BACKFILL = 1000
"""The most missed ticks one pass enqueues for a ``backfill=True`` schedule (the latest ones):
a long outage of a frequent schedule would otherwise enqueue without bound."""

EPOCH = datetime(1970, 1, 1, tzinfo=dt_timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


# -- ticks ---------------------------------------------------------------------------------


MIN_EVERY = timedelta(seconds=1)
"""The shortest interval schedule: a tick per second is what cron's seconds field reaches too."""

@dataclass(frozen=True)
class Every:
    """Ticks at every multiple of `interval` since the Unix epoch: the same instants on every
    worker, whenever it started."""

    interval: timedelta

    def ticks(self, after: datetime, until: datetime, limit: int) -> list[datetime]:
        """The ticks in ``(after, until]``, ascending; only the last `limit` of them."""
        step = self.interval // _MICROSECOND
        first = (after - EPOCH) // _MICROSECOND // step + 1
        last = (until - EPOCH) // _MICROSECOND // step
        first = max(first, last - limit + 1)
        return [EPOCH + timedelta(microseconds=n * step) for n in range(first, last + 1)]

    def next_after(self, after: datetime) -> datetime:
        step = self.interval // _MICROSECOND
        return EPOCH + timedelta(microseconds=((after - EPOCH) // _MICROSECOND // step + 1) * step)


@dataclass(frozen=True)
class Cron:
    """Ticks where croniter matches `expression` on the wall clock of `zone`.

    Daylight saving time, as cron daemons handle it: a wall time the spring change skips runs
    at the first instant after the gap (croniter's answer); a wall time the autumn change
    repeats runs once, at its first pass, when the expression names its hours (``30 2 * * *``),
    and at both passes when the hour field is ``*`` (``*/15 * * * *`` keeps ticking every 15
    real minutes)."""

    expression: str
    zone: tzinfo
    every_hour: bool = field(default=False, compare=False)

    @classmethod
    def parse(cls, expression: str, zone: tzinfo) -> Cron:
        """Checked by croniter, which also finds its next match (an expression that never
        matches, like February 30th, is refused here rather than on a worker)."""
        from croniter import CroniterError

        try:
            iterator = _croniter(expression, datetime.now(zone))
            iterator.get_next(datetime)
        except (CroniterError, ValueError, KeyError, TypeError) as exc:
            raise ConfigurationError(f"cron expression {expression!r} is not valid: {exc}") from None
        return cls(expression, zone, every_hour=iterator.expanded[1] == ["*"])

    def ticks(self, after: datetime, until: datetime, limit: int) -> list[datetime]:
        """The ticks in ``(after, until]``, ascending; only the last `limit` of them (found
        walking back from `until`, so a long gap costs `limit` steps at most)."""
        found: list[datetime] = []
        iterator = _croniter(self.expression, (until + _MICROSECOND).astimezone(self.zone))
        while len(found) < limit:
            tick = iterator.get_prev(datetime).astimezone(dt_timezone.utc)
            if tick <= after:
                break
            if self._runs(tick) and (not found or tick < found[-1]):
                found.append(tick)
        return found[::-1]

    def next_after(self, after: datetime) -> datetime:
        iterator = _croniter(self.expression, after.astimezone(self.zone))
        while True:
            tick = iterator.get_next(datetime).astimezone(dt_timezone.utc)
            if tick > after and self._runs(tick):
                return tick

    def _runs(self, tick: datetime) -> bool:
        """False for the second pass of a repeated wall time, unless the hour field is ``*``."""
        local = tick.astimezone(self.zone)
        if self.every_hour or not local.fold:
            return True
        return local.replace(fold=0).utcoffset() == local.utcoffset()


def _croniter(expression: str, start: datetime) -> Any:
    """croniter, imported on first use: a worker or command without cron schedules (most) does
    not pay its import (with dateutil's, some 40 ms) at start-up."""
    from croniter import croniter

    return croniter(expression, start)


# -- schedules -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """One periodic schedule of a task, as declared with `Queue.periodic`, checked when built
    (a `ConfigurationError` names the bad field).

    Exactly one of `cron` and `every` (a timedelta; seconds are accepted and converted).
    `timezone` is the IANA zone a cron expression is read in; interval ticks are multiples of
    `every` since the Unix epoch, the same in every zone, so they take no other zone than UTC.
    `queue` and `priority` None mean the task's own. `payload` is kept as a copy.
    `skip_if_pending` (default: True, unless `backfill` asks for every missed tick): a tick is
    passed over while a job of an earlier tick (the same task and payload) waits, pending, on
    the schedule's queue."""

    name: str
    task: str
    cron: str | None = None
    every: timedelta | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    timezone: str = "UTC"
    backfill: bool = False
    skip_if_pending: bool | None = None
    timing: Every | Cron = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_field = functools.partial(object.__setattr__, self)
        set_field("name", _validate.as_config(_validate.name, self.name, "schedule name"))
        set_field("payload", _payload_copy(self.payload))
        if self.queue is not None:
            _validate.as_config(_validate.queue_name, self.queue, "queue of a schedule")
        if self.priority is not None:
            _validate.as_config(_validate.priority, self.priority, "priority of a schedule")
        if self.skip_if_pending is None:
            set_field("skip_if_pending", not self.backfill)
        for flag in ("backfill", "skip_if_pending"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigurationError(f"{flag} must be True or False, got {type(getattr(self, flag)).__name__}")
        if (self.cron is None) == (self.every is None):
            raise ConfigurationError("a schedule needs exactly one of cron= (an expression) or every= (an interval)")
        zone = _zone(self.timezone)
        if self.every is not None:
            if zone is not dt_timezone.utc:
                raise ConfigurationError(
                    "timezone= applies to cron= schedules; every= ticks are multiples of the interval "
                    "since the Unix epoch, the same in every zone"
                )
            every = _validate.as_config(_validate.duration, self.every, "every", positive=True)
            if every < MIN_EVERY:  # a typo (milliseconds for seconds) would flood the table
                raise ConfigurationError(f"every= must be at least 1 second, got {every.total_seconds():g} s")
            set_field("every", every)
            set_field("timing", Every(self.every))
        elif not isinstance(self.cron, str) or not self.cron.strip():
            raise ConfigurationError(f"cron must be a non-empty string, got {self.cron!r}")
        else:
            set_field("timing", Cron.parse(self.cron, zone))

    @property
    def spec(self) -> str:
        """The schedule as declared: the cron expression, or ``every 30s``."""
        if self.cron is not None:
            return self.cron
        return f"every {_format_interval(self.every)}"  # type: ignore[arg-type]

    def next_tick(self, after: datetime) -> datetime:
        """The first tick strictly after `after` (UTC)."""
        return self.timing.next_after(after)

    def due_ticks(self, after: datetime, until: datetime, limit: int = 1) -> list[datetime]:
        """The ticks in ``(after, until]`` (UTC, ascending), at most the latest `limit`."""
        return self.timing.ticks(after, until, limit)


class PeriodicOptions(TypedDict, total=False):
    """`Queue.periodic`'s options: exactly one of `cron` (croniter's syntax; a sixth field counts
    seconds) and `every` (a timedelta or seconds; ticks are multiples of it since the Unix
    epoch); `payload` of each tick's job; `queue` and `priority` (default: the task's);
    `timezone` (an IANA name, default UTC) a cron expression is read in; `backfill` (enqueue
    ticks missed while no worker ran, up to `MAX_BACKFILL`); `skip_if_pending` (default True
    unless `backfill`: no new tick while a job of an earlier one is still pending on the queue,
    so ticks do not pile up behind a queue whose workers do not take them); `name` (default: the task's)."""

    cron: str | None
    every: timedelta | float | None
    payload: Mapping[str, Any] | None
    queue: str | None
    priority: int | None
    timezone: str | None
    backfill: bool
    skip_if_pending: bool | None
    name: str | None


class Schedules:
    """The schedules declared on one queue (`Queue.periodic`); shared by every copy of the
    queue (`Queue.on_engine`), as its tasks are."""

    def __init__(self, tasks: TaskRegistry) -> None:
        self._tasks = tasks
        self._by_name: dict[str, Schedule] = {}

    def periodic(self, target: Task | Callable[..., Any], *, register: Callable[[Any], Task],
                 max_payload_bytes: int, name: str | None = None, timezone: str | None = None,
                 payload: Any = None, **options: Any) -> Task:
        """Declare a schedule of `target` (a Task, or a handler that `register` makes one) and
        return the task. Every option is checked before a handler is registered; the payload's
        size last, against the limit of the task it is for."""
        unknown = sorted(set(options) - PeriodicOptions.__optional_keys__)
        if unknown:
            raise TypeError(f"periodic() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}")
        fields = {"timezone": "UTC" if timezone is None else timezone,
                  "payload": {} if payload is None else payload, **options}
        draft = Schedule(name=(_task_name_of(target) or "unnamed") if name is None else name, task="",
                         **fields)
        self._refuse_taken(draft.name)
        task = self._task_for(target, register)
        schedule = Schedule(name=task.name if name is None else name, task=task.name, **fields)
        self._refuse_taken(schedule.name)
        size, limit = len(_validate.payload_json(schedule.payload)), task.max_payload_bytes or max_payload_bytes
        if size > limit:
            raise ConfigurationError(f"schedule {schedule.name!r}: {_validate.payload_too_large(task.name, size, limit)}")
        self._by_name[schedule.name] = schedule
        return task

    def all(self) -> list[Schedule]:
        return list(self._by_name.values())

    def _refuse_taken(self, name: str) -> None:
        if name in self._by_name:
            raise ConfigurationError(
                f"a schedule named {name!r} is already declared; give this one its own name= "
                "(a task with two schedules needs a name for each)"
            )

    def _task_for(self, target: Any, register: Callable[[Any], Task]) -> Task:
        """A Task is looked up (one of another queue is unknown here); a handler is this
        queue's task if registered, else registered now with the task defaults."""
        if isinstance(target, Task):
            return self._tasks.resolve(target)
        try:
            return self._tasks.resolve(target)
        except UnknownTaskError:
            return register(target)


def _zone(name: Any) -> tzinfo:
    """The zone named; UTC needs no time zone database (slim containers may lack one)."""
    if not isinstance(name, str):
        raise ConfigurationError(f"timezone must be an IANA zone name such as 'Europe/Berlin', got {type(name).__name__}")
    if name == "UTC":
        return dt_timezone.utc
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ConfigurationError(
            f"unknown timezone {name!r}; use an IANA zone name such as 'Europe/Berlin' (where the "
            "system has no time zone database, install the tzdata package)"
        ) from None


def _payload_copy(payload: Any) -> dict[str, Any]:
    """The payload as every tick's job gets it, checked like an enqueue's; a copy, so changing
    the dict afterwards changes no tick."""
    try:
        return json.loads(_validate.payload_json(payload))
    except SqlaQueueError as exc:
        raise ConfigurationError(f"schedule payload: {exc}") from None


def _task_name_of(target: Any) -> str | None:
    """The task name a target will have, as far as it is known before registering it."""
    return target.name if isinstance(target, Task) else getattr(target, "__name__", None)


def _format_interval(interval: timedelta) -> str:
    seconds = interval.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
