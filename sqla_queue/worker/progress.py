"""The worker's progress line: what it did since the last one, at ``INFO``, while it does
anything. At a few jobs a second every completion has a record of its own; past
`plugins.builtins.logging.COMPLETIONS_PER_SECOND` this line is how the log still says that
work is getting done, and how much."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from .config import WorkerSummary

logger = logging.getLogger("sqla_queue.worker")

PROGRESS_EVERY = 30.0
"""Seconds between progress lines (none while the worker does nothing)."""
FINISHED = ("completed", "retried", "failed", "snoozed", "cancelled", "lost", "released")
"""The tallies of jobs that left the worker: a line is logged when one of them moved."""


@dataclass(frozen=True)
class ProgressLine:
    """One progress line's figures (what `Progress.run_once` returns)."""

    seconds: float
    done: WorkerSummary

    def message(self, worker_id: str) -> str:
        d = self.done
        rate = d.completed / self.seconds if self.seconds > 0 else 0.0
        others = ", ".join(f"{getattr(d, name):,} {name}" for name in FINISHED[1:] if getattr(d, name))
        return (f"worker {worker_id}: {d.completed:,} completed ({rate:,.0f}/s)"
                f"{', ' + others if others else ''} in the last {self.seconds:.0f}s")


class Progress:
    """A `services.Service`: every `every` seconds, log what the worker's `summary` (a
    snapshot taker) counted since the last line, if anything."""

    def __init__(self, worker_id: str, summary: Callable[[], WorkerSummary], *, every: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.worker_id = worker_id
        self.every = PROGRESS_EVERY if every is None else every
        self._summary = summary
        self._clock = clock
        self._since = clock()
        self._last = summary()

    def next_due(self) -> float:
        return self._since + self.every

    def run_if_due(self) -> ProgressLine | None:
        if self._clock() < self.next_due():
            return None
        return self.run_once()

    def run_once(self) -> ProgressLine | None:
        """Log the line now (if anything happened since the last one) and start a new span."""
        now, current = self._clock(), self._summary()
        done = WorkerSummary(**{f.name: getattr(current, f.name) - getattr(self._last, f.name)
                                for f in dataclasses.fields(WorkerSummary)})
        line = ProgressLine(seconds=now - self._since, done=done)
        self._since, self._last = now, current
        if not any(getattr(done, name) for name in FINISHED):
            return None
        logger.info(line.message(self.worker_id), extra={"worker_id": self.worker_id, "outcome": "progress",
                                                         **dataclasses.asdict(done)})
        return line
