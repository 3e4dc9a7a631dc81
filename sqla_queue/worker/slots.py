"""A worker's slots: the jobs it holds, the ones waiting in its buffer for a free handler, the
finished ones waiting for the claim loop's next transaction, and the tally of what its run did.

A held job is in one of three places: the **buffer** (claimed, not yet taken by a handler: the
prefetch), a **handler** (at most ``concurrency`` at once), or the **finished** list (its
completion goes with the next round). Capacity is ``concurrency`` plus the prefetch, so a round
can claim while every handler is busy. Jobs leave the buffer in claim order as handlers free up;
a handler's end takes the next one at once, on its own thread, without waiting for the claim loop.

Shared by the claim loop (which fills slots and completes finished jobs), the job runs (which
hand finished jobs over and free slots) and the lease keeper (which reads a snapshot). Every
method is thread-safe.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from .config import WorkerSummary
from .held_job import HeldJob

TARGET_WAIT = 1.0
"""Seconds a buffered job should wait for a handler at most: the adaptive prefetch keeps about
this many seconds of work in the buffer."""
PREFETCH_PER_HANDLER = 8
"""The adaptive prefetch's ceiling, per handler: it binds only for jobs shorter than
`TARGET_WAIT` / this. Eight rather than four made two processes x concurrency 10 drain no-op
jobs 14 % faster (fewer, larger rounds: docs/explanation/prefetch.md); past that a larger buffer
adds nothing measured, only to what a crash leaves waiting for its lease."""
_SMOOTHING = 0.1  # weight of one handler duration in the running mean


class PrefetchSize:
    """How many jobs to hold beyond `concurrency`: `fixed`, or (None) adapted to the handlers'
    mean duration so that the buffer holds about `TARGET_WAIT` seconds of work. Nothing is
    prefetched before the first handler ends: until then nothing says how long jobs take."""

    def __init__(self, concurrency: int, fixed: int | None) -> None:
        self.concurrency = concurrency
        self.fixed = fixed
        self.mean_duration: float | None = None

    def observe(self, duration: float) -> None:
        mean = self.mean_duration
        self.mean_duration = duration if mean is None else mean + _SMOOTHING * (duration - mean)

    def size(self, stalled_for: float = 0.0) -> int:
        """`stalled_for`: how long every handler has been busy with its current job (0 when
        one is free): a lower bound on how long the next free handler takes, even before any
        of those jobs ends."""
        if self.fixed is not None:
            return self.fixed
        if self.mean_duration is None:
            return 0
        duration = max(self.mean_duration, stalled_for, 1e-6)
        return min(PREFETCH_PER_HANDLER * self.concurrency, int(self.concurrency * TARGET_WAIT / duration))


class Nudger:
    """What the listener sets on a notification (it takes an Event's ``set``): a claim hint."""

    def __init__(self, slots: Slots) -> None:
        self.set = slots.nudge


class Slots:
    """At most `concurrency` jobs in handlers and `concurrency` + prefetch held; `wake` is set
    whenever the claim loop may have something to do (a slot freed, a completion to send, the
    buffer running low). `stopping`: once set, no buffered job goes to a handler (shutdown
    releases them)."""

    def __init__(self, concurrency: int, wake: threading.Event, *, prefetch: int | None = 0,
                 stopping: threading.Event | None = None) -> None:
        self.concurrency = concurrency
        self.prefetch = PrefetchSize(concurrency, prefetch)
        self.capacity = concurrency + self.prefetch.size()
        self.summary = WorkerSummary()
        self.dispatch: Callable[[list[HeldJob]], None] = lambda held: None  # hands jobs to handlers
        self._claim_hint = False  # a claim may find something: an outcome recorded, a notification
        self._wake = wake
        self._stopping = stopping or threading.Event()
        self._lock = threading.Lock()
        # By claim, not by job: a job recovered from this worker may be claimed by it again while
        # its old claim's handler still runs (and the lease keeper must see both).
        self._held: dict[tuple[int, str], HeldJob] = {}
        self._buffer: deque[tuple[float, HeldJob]] = deque()  # (when buffered, job), claim order
        self._in_handler: dict[tuple[int, str], float] = {}  # claim -> when a handler took it
        self._finished: list[HeldJob] = []
        self._first_finished_at = 0.0

    # -- holding ------------------------------------------------------------------------

    def hold(self, held: Iterable[HeldJob]) -> None:
        """Claimed jobs: into the buffer, and on to the handlers that are free."""
        now = time.monotonic()
        with self._lock:
            for h in held:
                self._held[h.key] = h
                self._buffer.append((now, h))
            starting, dropped = self._take_buffered(now)
        self._started(starting, dropped)

    def superseded_by(self, held: Iterable[HeldJob]) -> list[HeldJob]:
        """Jobs this worker holds under an older claim than one in `held`: recovered from it
        (its lease ran out) and claimed by it again. The old claim is lost; the caller gives it
        up (the lease keeper could not tell the two claims of one job apart)."""
        ids = {h.job.id: h.job.claim_token for h in held}
        with self._lock:
            return [old for (job_id, token), old in self._held.items()
                    if job_id in ids and ids[job_id] != token]

    def _take_buffered(self, now: float) -> tuple[list[HeldJob], bool]:
        """Under the lock: buffered jobs for the free handlers, their deadlines started. A job
        given up while buffered (lost, fenced) is dropped, its slot freed."""
        starting: list[HeldJob] = []
        dropped = False
        if self._stopping.is_set():
            return starting, dropped
        while self._buffer and len(self._in_handler) < self.concurrency:
            _, h = self._buffer.popleft()
            if not h.running:
                dropped = self._held.pop(h.key, None) is not None or dropped
                continue
            h.start_deadline()
            self._in_handler[h.key] = now
            starting.append(h)
        return starting, dropped

    def _started(self, starting: list[HeldJob], freed: bool) -> None:
        if starting:
            self.dispatch(starting)
        if freed:
            self.nudge()

    def _handler_ended(self, held: HeldJob, now: float) -> None:
        """Under the lock: `held`'s handler returned (or its run was given up)."""
        took = self._in_handler.pop(held.key, None)
        if took is not None:
            self.prefetch.observe(now - took)

    def forget(self, *held: HeldJob) -> None:
        """The jobs' outcomes are recorded (or given up): free their slots and handlers, and
        wake the claim loop to claim if a slot was freed (a retry may be due at once). Only
        then: a round that settled nothing must not wake it, or an idle worker claims in a
        tight loop instead of resting for the poll interval."""
        self._started(*self._free_slots(held))

    def _free_slots(self, held: Iterable[HeldJob]) -> tuple[list[HeldJob], bool]:
        now = time.monotonic()
        with self._lock:
            freed = False
            for h in held:
                self._handler_ended(h, now)
                freed = self._held.pop(h.key, None) is not None or freed
            starting, dropped = self._take_buffered(now)
        return starting, dropped or freed

    def nudge(self) -> None:
        """A claim may find something now (a notification, a recorded retry): wake the claim
        loop to claim, even if its last claim found the queue empty."""
        with self._lock:
            self._claim_hint = True
        self._wake.set()

    def take_claim_hint(self) -> bool:
        with self._lock:
            hint, self._claim_hint = self._claim_hint, False
        return hint

    def take_stale(self, ttl: float) -> list[HeldJob]:
        """Buffered jobs no handler took within `ttl` seconds, given up here and no longer
        held: the caller gives them back to the queue."""
        cutoff = time.monotonic() - ttl
        stale: list[HeldJob] = []
        with self._lock:
            while self._buffer and self._buffer[0][0] <= cutoff:
                _, h = self._buffer.popleft()
                self._held.pop(h.key, None)
                if h.give_up():
                    stale.append(h)
        return stale

    def snapshot(self) -> list[HeldJob]:
        with self._lock:
            return list(self._held.values())

    def held_count(self) -> int:
        with self._lock:
            return len(self._held)

    def free(self) -> int:
        return self.capacity - self.held_count()

    def buffered_count(self) -> int:
        with self._lock:
            return len(self._buffer)

    def oldest_buffered_at(self) -> float | None:
        with self._lock:
            return self._buffer[0][0] if self._buffer else None

    def running_count(self) -> int:
        return sum(1 for h in self.snapshot() if h.started and h.state == HeldJob.RUNNING)

    def resize(self) -> int:
        """Recompute the prefetch from what the handlers did so far; returns the capacity."""
        now = time.monotonic()
        with self._lock:
            busy = len(self._in_handler) >= self.concurrency
            stalled_for = now - max(self._in_handler.values()) if busy and self._in_handler else 0.0
            self.capacity = self.concurrency + self.prefetch.size(stalled_for)
        return self.capacity

    # -- finished jobs, completed by the claim loop's next transaction ----------------------

    def finished(self, held: HeldJob) -> None:
        """`held`'s handler succeeded: its completion goes with the next round, and its
        handler takes the next buffered job. Wakes the claim loop for the first completion
        waiting (it then sends them within the flush delay), once half the slots have finished,
        and when the buffer runs low."""
        now = time.monotonic()
        with self._lock:
            self._handler_ended(held, now)
            self._finished.append(held)
            waiting = len(self._finished)
            if waiting == 1:
                self._first_finished_at = now
            starting, dropped = self._take_buffered(now)
            low = len(self._buffer) < self.concurrency
        self._started(starting, dropped)
        if (waiting == 1 or waiting >= self.flush_size() or low) and not self._wake.is_set():
            # Set already: the claim loop has not looked yet (it clears before it looks), so it
            # sees this job; setting it again would cost a lock and a notify per job.
            self._wake.set()

    def flush_size(self) -> int:
        """Finished jobs worth a round of their own at once: half the slots."""
        return max(1, self.capacity // 2)

    def take_finished(self) -> list[HeldJob]:
        with self._lock:
            finished, self._finished = self._finished, []
        return [h for h in finished if h.state == HeldJob.COMPLETING]

    def give_back_finished(self, finished: list[HeldJob]) -> None:
        """A failed transaction completed nothing: try again next round (leases are renewed
        meanwhile; past the lease, fencing gives them up)."""
        if not finished:
            return
        with self._lock:
            if not self._finished:
                self._first_finished_at = time.monotonic()
            self._finished[:0] = finished

    def finished_waiting(self) -> bool:
        with self._lock:
            return bool(self._finished)

    def finished_count(self) -> int:
        with self._lock:
            return len(self._finished)

    def first_finished_at(self) -> float | None:
        """When the oldest completion still waiting was handed over (monotonic), or None."""
        with self._lock:
            return self._first_finished_at if self._finished else None

    # -- the tally --------------------------------------------------------------------------

    def tally(self) -> WorkerSummary:
        """A copy of the summary, consistent (taken under the lock)."""
        with self._lock:
            return dataclasses.replace(self.summary)

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
        # The claim loop's own call: no wake-up, no claim hint (a completion makes nothing due).
        starting, _ = self._free_slots(finished)
        self._started(starting, False)
