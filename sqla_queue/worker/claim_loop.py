"""The worker's claim loop: rounds that complete what finished and claim into the free slots,
the periodic services between rounds, and the rest until a notification, a freed slot, a
completion to send or the poll interval.

A round is one statement for every queue served (`Outcomes.complete_and_claim`), taken in a
turn that rotates each round, so an idle worker's cost does not grow with its queues and a busy
queue cannot starve the others; it claims only the tasks the worker registers. Sharing the
commit halves the commits per job (a commit waits for a WAL flush, the dominant cost of a no-op
job). The finished jobs still count as held until then, so a claim never reserves more jobs
than there are slots. Slots include the prefetch (`slots.Slots`): jobs claimed ahead of the handlers, so
rounds run while handlers do. A round is due when the buffer runs low, when half the slots have
finished, or when the oldest completion has waited `FLUSH_DELAY`; completions with no round
due (the buffer full, the queue empty) go in a statement of their own (`flush`). While a
backlog drains, each queue's claim resumes from where the last one got to in the queue's claim
order (`ClaimOrder.position`), skipping the dead index entries its predecessors left, and
starts over from the head every `RESTART_CLAIM_ORDER_EVERY` seconds (its first `HEAD_ROUNDS`
claims always start there). With the default order it
keeps its position when the queue runs dry, too: jobs keep arriving ahead of it, and a claim
that started at the head each time would read every entry claimed since the last VACUUM, all of
them while something holds the vacuum horizon (docs/explanation/storage.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..core import Core
from ..core.limits import RATE_AHEAD
from ..errors import DatabaseError, PermissionDeniedError
from ..services import Looper
from ..services.scheduler import Scheduler
from ..sql.claim import reads_around_position
from ..sql.lease import RETURNED_UNTAKEN
from .config import WorkerConfig
from .handler_threads import STALL_CHECK
from .held_job import HeldJob
from .runs import WorkerRuns
from .slots import Slots

logger = logging.getLogger("sqla_queue.worker")

ERROR_BACKOFF_MAX = 5.0
WARM_UP = 1.0
"""Seconds after its first claim a worker puts off its first periodic passes (recovery,
pruning, sampling), unless a claim finds nothing first with nothing held. They cost some 50 ms
of the interpreter (their statements compiled on first use), which would stall the rounds of a
worker that has just started under a backlog, and the completions of the last jobs of a drain;
none of them is urgent to the second: a lease that recovery looks for runs tens of seconds."""
FLUSH_DELAY = 0.005
"""Seconds a finished job's completion may wait for others to share its statement, at most."""
SPLIT_FLOOR = 200
"""Without a ``batch_size``, a claim takes at most half the worker's slots, but never caps it
below this many (`ClaimLoop.largest_claim`)."""
HEAD_ROUNDS = 2
"""A worker's first claims that start from the head of the claim order whatever the last one
got to: the second round carries the first completions, and building and compiling the claim
from a position for it (some 15 ms, once per process) would hold them back."""
RESTART_CLAIM_ORDER_EVERY = 1.0
"""Seconds between claims from the start of the claim order, per queue: the longest a job that
became due behind a position (enqueued with a past ``run_at``, or skipped while another claim
held it) waits."""


class ClaimLoop:
    """Rounds for the queues `serve` names on `core`, filling `slots` and handing jobs to
    `runs`; the `periodic` services run between rounds (`scheduler` also bounds the rest)."""

    def __init__(self, core: Core, config: WorkerConfig, worker_id: str, slots: Slots, runs: WorkerRuns,
                 periodic: Looper, scheduler: Scheduler, *, wake: threading.Event, stopping: threading.Event) -> None:
        self.core = core
        self.config = config
        self.worker_id = worker_id
        self.slots = slots
        self.runs = runs
        self.periodic = periodic
        self.scheduler = scheduler
        self.wake = wake
        self.stopping = stopping
        self.order = core.executor.order
        self.reads_around = reads_around_position(self.order)
        # Per queue: where the last claim got to in claim order, and when to start over.
        self.positions: dict[str, Any] = {}
        self.restart_at: dict[str, float] = {}
        # The last claim found nothing more due: claim again at `claim_at`, or when nudged.
        self.empty = False
        self.claim_at = 0.0
        self.queues: tuple[str, ...] = config.queues or ()
        self.tasks: tuple[str, ...] | None = None
        self.turn = 0  # rounds that claimed: which queue comes first in the next one
        # A limit held due jobs back in the last round: claim again then, not at the poll interval.
        self.throttled_until: float | None = None
        self.after_warm_up: Callable[[], None] | None = None
        """Called once, on this loop's thread, when its start-up's warm-up ends (before the first
        periodic passes): what no claim waits for (the worker's registration and LISTEN)."""

    def serve(self, queues: tuple[str, ...], tasks: list[str] | None) -> None:
        """Claim from `queues`, only jobs of `tasks` (None: any task)."""
        self.queues = tuple(queues)
        self.tasks = None if tasks is None else tuple(tasks)

    def run(self, until_empty: bool) -> None:
        """Rounds until stopped, or with `until_empty` until nothing is due and nothing held."""
        failures = 0
        # Start-up: the first rounds come before `after_warm_up` and the first periodic passes
        # (recovery, pruning, sampling), which wait `WARM_UP` after the first claim; a claim of
        # nothing, once nothing is held, runs them at once, before any rest and before
        # `until_empty` may end the run.
        warming, warm_until = True, float("inf")
        self.slots.nudge()  # the first round claims
        while not self.stopping.is_set():
            self.wake.clear()  # before looking, so that a change after the look cuts the rest short
            try:
                if warming and time.monotonic() >= warm_until:
                    warming = False
                if not warming:
                    self._warmed_up()
                    self.periodic.run_due()
                self.runs.grow_stalled_threads()
                self._return_stale()
                if self._claim_due(until_empty):
                    # Sampled before the claim: a job that finishes during it may retry at once, so
                    # "empty" only counts when nothing was held while the queue was looked at.
                    idle_before = self.slots.held_count() == 0
                    asked, claimed, from_start = self.round()
                    failures = 0
                    self._after_claim(asked, claimed, from_start)
                    if until_empty and self.empty and not from_start:
                        self.restart_at.clear()  # the last look starts at the head: nothing left behind
                    if warming:
                        # Held jobs keep it warm: their completions go before the passes.
                        warming = claimed > 0 or self.slots.held_count() > 0
                        warm_until = min(warm_until, time.monotonic() + WARM_UP)
                        if not warming:
                            continue  # the passes now, before any rest or the end of the run
                    if (until_empty and asked and claimed == 0 and idle_before and from_start
                            and self.throttled_until is None):
                        return
                elif self._flush_due():
                    self.flush()
                    failures = 0
            except PermissionDeniedError:  # no retry grants it: the worker stops, saying which
                raise
            except DatabaseError as exc:
                failures += 1
                delay = min(ERROR_BACKOFF_MAX, 0.1 * 2**failures)
                logger.warning("worker %s: database error, retrying in %.1fs: %s", self.worker_id, delay, exc)
                self.stopping.wait(delay)
                continue
            rest = self._rest(until_empty)
            if warming:
                rest = min(rest, max(0.0, warm_until - time.monotonic()))
            if rest > 0:
                self.wake.wait(rest)

    def _warmed_up(self) -> None:
        call, self.after_warm_up = self.after_warm_up, None
        if call is not None:
            call()

    # -- when to run a round ----------------------------------------------------------------

    def _after_claim(self, asked: int, claimed: int, from_start: bool) -> None:
        """Ran out of due jobs: from the start of the claim order, the queue is empty until a
        notification, a freed slot or the poll interval; from a position of an order whose
        claim reads around it, the same, but the claim from the start comes when due
        (`_claim_from`) if that is sooner; from a position of another order, look again from
        the start at once."""
        if not asked or claimed >= asked:
            self.empty = False
        elif from_start or self.reads_around:
            self.empty = True
            self.claim_at = time.monotonic() + self._idle_wait()
            if not from_start:
                self.claim_at = min([self.claim_at, *self.restart_at.values()])
            if self.throttled_until is not None:
                self.claim_at = min(self.claim_at, self.throttled_until)
        else:
            self.empty = False
            self.slots.nudge()

    def _claim_due(self, until_empty: bool) -> bool:
        """A round (completions and a claim) is due: while jobs are there to claim, when enough
        finished (half the slots), the oldest completion has waited `FLUSH_DELAY`, or the buffer
        runs low with room to claim; on an empty queue, when something may have been enqueued
        (a notification, a recorded retry, the poll interval), or to find it still empty with
        nothing held (`until_empty`: the last look before returning)."""
        hint = self.slots.take_claim_hint()
        if self.empty:
            return (hint or time.monotonic() >= self.claim_at
                    or (until_empty and self.slots.held_count() == 0 and self.throttled_until is None))
        if self._flush_due():
            return True
        room = self.slots.free() + self.slots.finished_count()
        return room > 0 and self.slots.buffered_count() < self.slots.concurrency

    def _flush_due(self) -> bool:
        first = self.slots.first_finished_at()
        if first is None:
            return False
        return (self.slots.finished_count() >= self.slots.flush_size()
                or time.monotonic() >= first + FLUSH_DELAY)

    def _rest(self, until_empty: bool = False) -> float:
        """Seconds until something is due without a wake-up: the oldest completion's flush,
        the oldest buffered job's TTL, the next claim on an empty queue, the periodic services.
        None with `until_empty` once the queue looked empty and the last held job is settled:
        the last look comes at once, not a poll interval later."""
        if until_empty and self.empty and self.slots.held_count() == 0 and self.throttled_until is None:
            return 0.0
        now = time.monotonic()
        due = [now + self._idle_wait()]
        first = self.slots.first_finished_at()
        if first is not None:
            due.append(first + FLUSH_DELAY)
        buffered = self.slots.oldest_buffered_at()
        if buffered is not None:
            due.append(buffered + self.config.prefetch_ttl)
        if self.empty:
            due.append(self.claim_at)
        if self.runs.threads_stalled():
            due.append(now + STALL_CHECK)
        return max(0.0, min(due) - now)

    def _idle_wait(self) -> float:
        """The poll interval, or less when a schedule's next tick comes sooner."""
        due_in = self.scheduler.seconds_until_due()
        return self.config.poll_interval if due_in is None else max(0.0, min(self.config.poll_interval, due_in))

    def _return_stale(self) -> None:
        """Buffered jobs no handler took within the prefetch TTL go back to the queue, their
        attempt handed back, for a worker with a free handler to take."""
        stale = self.slots.take_stale(self.config.prefetch_ttl)
        if not stale:
            return
        try:
            returned = self.core.outcomes.release((h.job for h in stale), RETURNED_UNTAKEN)
        except DatabaseError as exc:
            logger.error("worker %s: could not return %d buffered job(s); they return when their "
                         "lease expires: %s", self.worker_id, len(stale), exc)
            raise
        self.slots.count("released", len(returned))
        logger.info("worker %s returned %d buffered job(s) no handler took within %gs", self.worker_id,
                    len(returned), self.config.prefetch_ttl)

    # -- rounds -----------------------------------------------------------------------------

    def round(self) -> tuple[int, int, bool]:
        """One statement for every unlimited queue: complete what finished, claim into the free
        slots; then the limited queues' claims (`_claim_limited`), one short transaction each.
        Returns the jobs asked for, the jobs claimed and whether the claim started from the
        beginning of the claim order in every queue (only such a claim can tell that nothing
        is due)."""
        batch = self.config.effective_batch_size
        self.slots.resize()
        finished = self.slots.take_finished()
        free = self.slots.free() + len(finished)
        limit = 0 if self.stopping.is_set() else max(0, min(free, self.largest_claim() if batch is None else batch))
        self.throttled_until = None
        if not finished and limit <= 0:
            return 0, 0, True
        order = self._queue_order() if limit else list(self.queues)
        limited = self.core.limits.limited.known() if limit else frozenset()
        queues = [name for name in order if name not in limited]
        positions = {} if not limit or self.turn < HEAD_ROUNDS else {
            name: position for name in queues if (position := self._claim_from(name)) is not None}
        limited_order = [name for name in order if name in limited]
        # The finished jobs are completed first, in a transaction of their own (durable), also
        # when every queue is limited: a limited claim's commit does not wait for its flush.
        jobs = self._complete_and_claim(finished, queues, limit if queues else 0, positions) \
            if queues or finished else []
        if limit and queues:
            self._note_positions(queues, jobs, limit)
        got = len(jobs) + self._claim_limited(limited_order, limit - len(jobs))
        if limit:
            self.turn += 1
            self.core.limits.limited.refresh_if_stale()  # after the claim: a wake-up's claim never waits for it
        self.slots.count("claimed", len(jobs))
        return limit, got, not positions

    def largest_claim(self) -> int:
        """The most one claim takes without a ``batch_size``: half the slots, or `SPLIT_FLOOR`.

        A claim of every free slot makes the round that carries it as long as the handlers'
        work on a full buffer, and holds back the completions that wait for it: a worker that
        has just learnt its jobs are short (its prefetch grown from none to eight per handler)
        claimed 1,600 jobs while its first 199 completions waited. Halved, one half runs
        through the handlers while the round claims the next, and the last jobs of a backlog
        go to the workers in halves, not all to whichever claims first (docs/explanation/
        prefetch.md: 1.05x from process start on PostgreSQL 15, within the noise on 18). The
        floor keeps small rounds whole: there a round's own cost (a statement, a commit) weighs
        more than what splitting saves (two processes at concurrency 10 drained 8 % slower with
        their 90 slots halved)."""
        return max(SPLIT_FLOOR, self.slots.capacity // 2)

    def _claim_limited(self, queues: list[str], room: int) -> int:
        """Claim up to `room` jobs from the limited `queues`, in turn; a claim a limit held back
        sets `throttled_until`, when to look again (`LimitedClaim.retry_after`)."""
        got = 0
        for name in queues:
            if room - got <= 0:
                break
            claim = self.core.outcomes.claim_limited(name, self.worker_id, room - got, self.config.lease, self.tasks,
                                                     ahead=RATE_AHEAD)
            self.hold(claim.jobs)
            self.slots.count("claimed", len(claim.jobs))
            got += len(claim.jobs)
            if claim.throttled or (not claim.jobs and claim.retry_after == 0):
                wait = time.monotonic() + claim.retry_after
                self.throttled_until = min(wait, self.throttled_until or wait)
        return got

    def _complete_and_claim(self, finished: list[HeldJob], queues: list[str], limit: int,
                            positions: dict[str, Any]) -> list:
        outcomes = self.core.outcomes
        try:
            texts = outcomes.result_texts([h.job for h in finished], _results_of(finished))
            results, jobs = outcomes.complete_and_claim(
                [h.job for h in finished], queues, self.worker_id, limit, positions, texts, self.config.lease,
                self.tasks)
        except DatabaseError:
            self.slots.give_back_finished(finished)
            raise
        self.slots.settle_completed(finished, results)
        self.hold(jobs)
        return jobs

    def hold(self, jobs: list) -> None:
        if not jobs:
            return
        held = [self.runs.held(job) for job in jobs]
        for old in self.slots.superseded_by(held):
            if old.give_up():
                self.runs.cancel(old)
                self.runs.report_fenced(old, "its lease expired and this worker claimed the job again")
            if not old.started:
                self.slots.forget(old)
        self.slots.hold(held)  # the buffer, and on to free handlers

    def _queue_order(self) -> list[str]:
        """The served queues, starting one further each round that claims: the first queue
        takes what it can, so each comes first in turn and one busy queue cannot starve the
        others."""
        queues = list(self.queues)
        shift = self.turn % len(queues)
        return queues[shift:] + queues[:shift]

    def _claim_from(self, queue_name: str) -> Any:
        """Where to start this queue's claim: after the last claim's position while working
        through a backlog, from the start of the claim order every
        `RESTART_CLAIM_ORDER_EVERY` seconds (and always, for an order that cannot resume)."""
        now = time.monotonic()
        if not self.order.resumes() or now >= self.restart_at.get(queue_name, 0.0):
            self.restart_at[queue_name] = now + RESTART_CLAIM_ORDER_EVERY
            return None
        return self.positions.get(queue_name)

    def _note_positions(self, queues: list[str], jobs: list, limit: int) -> None:
        """Per queue, in the claim's turn: the one that took the last of the limit may have
        more (resume from where it got to); the queues after it were not read (keep theirs).
        One that gave fewer jobs than were left to claim ran out of due jobs from where it
        started: with an order whose claim reads around its position
        (`reads_around_position`), it has seen every due job but those behind it, so keep
        going from where it got to (the restart finds those); with another, start over."""
        left = limit
        for name in queues:
            got = [job for job in jobs if job.queue == name]
            position = self.order.position(got) if got else None
            if position is not None and (len(got) >= left or self.reads_around):
                self.positions[name] = position
            elif len(got) < left and not self.reads_around:
                self.positions.pop(name, None)
            if len(got) >= left:
                return
            left -= len(got)

    def flush(self) -> None:
        """Complete the jobs that finished, without claiming: no round is due (the queue is
        empty, or the buffer full). A failed statement gives them back for the next try."""
        finished = self.slots.take_finished()
        if not finished:
            return
        try:
            results = self._complete(finished)
        except DatabaseError:
            self.slots.give_back_finished(finished)
            raise
        self.slots.settle_completed(finished, results)

    def complete_finished(self) -> None:
        """Complete the jobs that finished, without claiming (the drain at shutdown): a failed
        statement leaves them to lease recovery."""
        finished = self.slots.take_finished()
        if not finished:
            return
        try:
            results = self._complete(finished)
        except DatabaseError as exc:
            logger.error("worker %s: could not complete %d finished job(s); they return when "
                         "their lease expires: %s", self.worker_id, len(finished), exc)
            results = {}
        self.slots.settle_completed(finished, results)

    def _complete(self, finished: list[HeldJob]) -> dict:
        outcomes = self.core.outcomes
        jobs = [h.job for h in finished]
        return outcomes.complete_many(jobs, outcomes.result_texts(jobs, _results_of(finished)))


def _results_of(finished: list[HeldJob]) -> dict[int, Any] | None:
    results = {h.job.id: h.result for h in finished if h.result is not None}
    return results or None
