"""The lease keeper: keeps the leases of a worker's running jobs alive, gives up the ones it
cannot keep, and notices handlers that outlive their task's timeout.

Every held job is renewed, the prefetched ones waiting in the worker's buffer included: they are
``running`` in the database like the others. Only a job a handler took has a deadline
(``handler_deadline`` is None until then), so a task's timeout never counts time spent buffered.

A `Service` (`sqla_queue.services`): a `LeaseKeeperConfig` validated when it is built;
`LeaseKeeper.run_once()`, one pass that returns a `LeaseKeeperResult`; `run_if_due()`, the
pass its thread's `Looper` makes every tick (timeouts every tick, renewal every ``lease /
3``). The keeper only decides: it gives up each job it cannot keep (`Leased.give_up`) and says so
in the result; the worker that holds the jobs records their outcomes and reports them.

The same beat then refreshes the worker's row in the worker registry (`heartbeat`, one
statement; `services.registry`), whether or not the worker holds jobs, so a worker that stops
beating is seen dead one lease later, when its jobs' leases have run out too.

Why ``lease / 3``: two renewals can fail in a row (each under the worker's call deadline) and
the lease still holds. Why fence: once a lease may have expired, recovery may hand the job to
another worker, so this one must stop treating it as its own (self-fencing).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from .. import _validate
from ..core import Core
from ..errors import ConfigurationError, DatabaseError, PermissionDeniedError
from ..types import DEFAULT_LEASE, ClaimedJob

logger = logging.getLogger("sqla_queue.worker")


class Leased(Protocol):
    """A job the keeper keeps (the worker's `Leased`): its claim, when its lease was last
    known renewed and its handler's deadline (monotonic seconds), and the state changes the
    keeper may make, each True only for the one party that made it."""

    job: ClaimedJob
    lease_confirmed: float
    handler_deadline: float | None

    @property
    def running(self) -> bool: ...

    def give_up(self) -> bool: ...

    def request_cancel(self) -> bool: ...


@dataclass(frozen=True)
class LeaseKeeperConfig:
    """:param lease: how long a claim stays valid without renewal (the worker's ``lease``)."""

    lease: timedelta = DEFAULT_LEASE

    def __post_init__(self) -> None:
        object.__setattr__(self, "lease", _validate.as_config(_validate.duration, self.lease, "lease", positive=True))

    @property
    def lease_seconds(self) -> float:
        return self.lease.total_seconds()

    @property
    def renew_every(self) -> float:
        return self.lease_seconds / 3

    @property
    def tick(self) -> float:
        """How often timeouts are checked: often enough to stop a handler close to its timeout
        and to renew close to schedule, at most once a second."""
        return min(1.0, self.renew_every / 4)


@dataclass(frozen=True)
class LeaseKeeperResult:
    """What one pass did to the jobs it looked at.

    ``renewed``: leases restarted. ``cancel_requested``: renewed jobs someone asked to cancel
    since the last pass (their handlers were told). ``lost``: not renewed because the claim is
    no longer this worker's (the heartbeat already reported it). ``fenced``: the renewal failed and the lease
    may have expired, so the job was given up. ``timed_out``: the handler outlived its task's
    timeout; the job is settled here and its outcome is the worker's to record.
    ``renewal_failed``: the renewal statement failed (the database did not answer in time).
    """

    renewed: tuple[Leased, ...] = ()
    cancel_requested: tuple[Leased, ...] = ()
    lost: tuple[Leased, ...] = ()
    fenced: tuple[Leased, ...] = ()
    timed_out: tuple[Leased, ...] = ()
    renewal_failed: bool = False


class LeaseKeeper:
    """Keeps the leases of the jobs `held` returns (a snapshot, called once per pass); `owner`
    names the holder in log lines; `heartbeat` (if given) is called on every renewal beat and
    must not raise (`WorkerRegistration.beat`)."""

    def __init__(self, core: Core, config: LeaseKeeperConfig, held: Callable[[], Iterable[Leased]],
                 *, owner: str = "worker", heartbeat: Callable[[], object] | None = None) -> None:
        if not isinstance(config, LeaseKeeperConfig):
            raise ConfigurationError(f"config must be a LeaseKeeperConfig, got {type(config).__name__}")
        self.outcomes = core.outcomes
        self.config = config
        self._held = held
        self.owner = owner
        self._heartbeat = heartbeat
        self._next_renewal = time.monotonic() + config.renew_every

    def run_once(self) -> LeaseKeeperResult:
        """Enforce timeouts, then beat: renew every running job's lease now."""
        timed_out = self._enforce_timeouts()
        return self._beat(timed_out)

    def run_if_due(self) -> LeaseKeeperResult:
        """Enforce timeouts; renew only when ``lease / 3`` has passed since the last renewal."""
        timed_out = self._enforce_timeouts()
        now = time.monotonic()
        if now < self._next_renewal:
            return LeaseKeeperResult(timed_out=timed_out)
        self._next_renewal = now + self.config.renew_every
        return self._beat(timed_out)

    def _beat(self, timed_out: tuple[Leased, ...]) -> LeaseKeeperResult:
        """Renew, then refresh the registry row. Not after a renewal that failed: the database
        is not answering, and a heartbeat waiting out its call deadline too would push the next
        renewal towards the end of the leases."""
        result = self._renew(timed_out)
        if self._heartbeat is not None and not result.renewal_failed:
            self._heartbeat()
        return result

    def next_due(self) -> float:
        """Every tick (its `Looper` sleeps at most that long)."""
        return time.monotonic() + self.config.tick

    def _enforce_timeouts(self) -> tuple[Leased, ...]:
        now = time.monotonic()
        return tuple(h for h in self._held()
                     if h.handler_deadline is not None and now >= h.handler_deadline and h.give_up())

    def _renew(self, timed_out: tuple[Leased, ...]) -> LeaseKeeperResult:
        # Only running jobs: a finished one is completed within the claim loop's next
        # transaction, which reports it lost if its claim was taken meanwhile.
        held = [h for h in self._held() if h.running]
        if not held:
            return LeaseKeeperResult(timed_out=timed_out)
        started = time.monotonic()
        try:
            renewed_ids = self.outcomes.renew((h.job for h in held), self.config.lease)
        except PermissionDeniedError:
            raise  # no later renewal can succeed: the worker stops (its looper's `halt`)
        except DatabaseError as exc:
            logger.warning("%s: lease renewal failed: %s", self.owner, exc)
            return LeaseKeeperResult(fenced=self._fence_expired(held), timed_out=timed_out, renewal_failed=True)
        renewed, cancelling, lost = [], [], []
        for h in held:
            if h.job.id in renewed_ids:
                h.lease_confirmed = started
                renewed.append(h)
                if renewed_ids[h.job.id] and h.request_cancel():
                    cancelling.append(h)
            elif h.give_up():  # not renewed, still running: lost (already reported)
                lost.append(h)
        return LeaseKeeperResult(renewed=tuple(renewed), cancel_requested=tuple(cancelling), lost=tuple(lost),
                                 timed_out=timed_out)

    def _fence_expired(self, held: list[Leased]) -> tuple[Leased, ...]:
        now = time.monotonic()
        return tuple(h for h in held
                     if now - h.lease_confirmed >= self.config.lease_seconds and h.give_up())
