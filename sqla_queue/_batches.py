"""The payload of `sqla_queue_batch_committed`, re-exported by `sqla_queue.types` beside the
other lifecycle events (kept apart only because types.py is at its length limit)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


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
