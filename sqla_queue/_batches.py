"""The payload of `sqla_queue_batch_committed`, re-exported by `sqla_queue.types` beside the
other lifecycle events, and what a workflow's batch reports (`BatchStatus`, `Queue.batch`;
``ctx.batch`` through `WorkflowReads`): kept apart only because types.py is at its length limit."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from .states import FINISHED_STATUSES, JobStatus


@dataclass(frozen=True)
class BatchCommitted:
    """One committed batch statement: a claim round (``operation`` ``"claim"``: the jobs it
    claimed, and the completions it flushed in the same statement) or a completion flush
    (``"complete"``). ``started_at`` is the wall clock when it started (UTC), ``duration`` how
    long it took to commit, measured by the process's monotonic clock."""

    operation: str
    worker_id: str | None
    queues: tuple[str, ...]
    claimed: tuple[int, ...]
    completed: tuple[int, ...]
    started_at: datetime
    duration: timedelta


@dataclass(frozen=True)
class BatchStatus:
    """Where a batch (`Queue.batch`) stands: `batch_id` (its callback job's id), `total` jobs,
    `counts` by status (``"pruned"`` for a job no longer stored), and the callback's status
    (None once pruned). `finished`: every job of the batch is terminal, so the callback is due
    or has run. Also what the callback's handler reads as ``ctx.batch``."""

    batch_id: int
    total: int
    counts: Mapping[str, int]
    callback: JobStatus | None

    @property
    def finished(self) -> bool:
        done = {status.value for status in FINISHED_STATUSES} | {"pruned"}
        return all(status in done for status in self.counts)


def batch_status(batch_id: int, counts: Iterable[tuple[str | None, int]], callback: str | None) -> BatchStatus:
    """A `BatchStatus` from ``(status, count)`` rows of the batch's jobs (None: pruned),
    counts in status order so that they print the same every time."""
    by_status = dict(sorted((status or "pruned", count) for status, count in counts))
    return BatchStatus(batch_id=batch_id, total=sum(by_status.values()), counts=MappingProxyType(by_status),
                       callback=None if callback is None else JobStatus(callback))


class WorkflowReads:
    """What a handler reads of its place in a workflow, on demand, given its job's id:
    `results`, its dependencies' results (``ctx.dependency_results``); `batch`, ``ctx.batch``.
    One serves every job a core runs (each context asks with its own id): nothing per job."""

    def __init__(self, results: Callable[[int], Mapping[int, Any]],
                 batch: Callable[[int], BatchStatus | None]) -> None:
        self.results = results
        self.batch = batch
