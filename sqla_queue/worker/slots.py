"""A worker's slots: the jobs it holds, the finished ones waiting for the claim loop's next
transaction, and the tally of what its run did.

Shared by the claim loop (which fills slots and completes finished jobs), the job runs (which
hand finished jobs over and free slots) and the lease keeper (which reads a snapshot). Every
method is thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from .config import WorkerSummary
from .held_job import HeldJob


class Slots:
    """At most `concurrency` held jobs; `wake` is set whenever a slot frees or a job finishes."""

    def __init__(self, concurrency: int, wake: threading.Event) -> None:
        self.concurrency = concurrency
        self.summary = WorkerSummary()
        self._wake = wake
        self._held: dict[int, HeldJob] = {}
        self._lock = threading.Lock()
        self._finished: list[HeldJob] = []
        self._finished_lock = threading.Lock()

    # -- holding ------------------------------------------------------------------------

    def hold(self, held: Iterable[HeldJob]) -> None:
        with self._lock:
            self._held.update((h.job.id, h) for h in held)

    def forget(self, *held: HeldJob) -> None:
        """The jobs' outcomes are recorded (or given up): free their slots, and wake the claim
        loop if a slot was freed. Only then: a round that settled nothing must not wake it, or
        an idle worker claims in a tight loop instead of resting for the poll interval."""
        with self._lock:
            freed = [h for h in held if self._held.pop(h.job.id, None) is not None]
        if freed:
            self._wake.set()

    def snapshot(self) -> list[HeldJob]:
        with self._lock:
            return list(self._held.values())

    def held_count(self) -> int:
        with self._lock:
            return len(self._held)

    def free(self) -> int:
        return self.concurrency - self.held_count()

    def running_count(self) -> int:
        return sum(1 for h in self.snapshot() if h.started and h.state == HeldJob.RUNNING)

    # -- finished jobs, completed by the claim loop's next transaction ----------------------

    def finished(self, held: HeldJob) -> None:
        """`held`'s handler succeeded: its completion goes with the next round."""
        with self._finished_lock:
            self._finished.append(held)
        self._wake.set()

    def take_finished(self) -> list[HeldJob]:
        with self._finished_lock:
            finished, self._finished = self._finished, []
        return [h for h in finished if h.state == HeldJob.COMPLETING]

    def give_back_finished(self, finished: list[HeldJob]) -> None:
        """A failed transaction completed nothing: try again next round (leases are renewed
        meanwhile; past the lease, fencing gives them up)."""
        with self._finished_lock:
            self._finished[:0] = finished

    def finished_waiting(self) -> bool:
        with self._finished_lock:
            return bool(self._finished)

    # -- the tally --------------------------------------------------------------------------

    def count(self, name: str, n: int = 1) -> None:
        """Add `n` to the summary's `name` (``completed``, ``lost``, ...)."""
        with self._lock:
            setattr(self.summary, name, getattr(self.summary, name) + n)

    def settle_completed(self, finished: list[HeldJob], results: dict[int, bool]) -> None:
        """A round's (or the drain's) completions committed: count them, free their slots."""
        settled = [h for h in finished if h.move(HeldJob.SETTLED, allowed=(HeldJob.COMPLETING,))]
        completed = sum(1 for h in settled if results.get(h.job.id))
        with self._lock:
            self.summary.completed += completed
            self.summary.lost += len(settled) - completed
        self.forget(*finished)
