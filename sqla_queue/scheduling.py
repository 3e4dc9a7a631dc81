"""Periodic jobs: schedules declared on a queue, and the scheduler every worker runs.

SKELETON from the Foundation commit: the periodic-jobs work fills this in (see issue 14).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._tasks import Task, TaskRegistry
    from .queue import Queue


@dataclass(frozen=True)
class Schedule:
    """One periodic schedule of a task."""

    name: str
    task: str
    cron: str | None = None
    every: timedelta | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    timezone: str = "UTC"
    backfill: bool = False


class Schedules:
    """The schedules declared on one queue (`Queue.periodic`)."""

    def __init__(self, tasks: TaskRegistry) -> None:
        self._tasks = tasks
        self._by_name: dict[str, Schedule] = {}

    def periodic(self, task: Task | Any = None, **options: Any) -> Any:
        raise NotImplementedError("periodic jobs are being built (issue 14)")

    def all(self) -> list[Schedule]:
        return list(self._by_name.values())


class Scheduler:
    """Enqueues the due ticks of `queue`'s schedules; one per worker."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue

    def run_if_due(self) -> None:
        """Enqueue every tick that came due since the last pass (cheap when none did)."""

    def seconds_until_due(self) -> float | None:
        """Seconds until the next tick of any schedule; None without schedules."""
        return None
