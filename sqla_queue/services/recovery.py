"""Lease recovery: take back running jobs whose lease expired, in bounded batches.

A job's lease expires when the worker holding it died, hung or lost the database for longer
than the lease; until someone recovers it the job stays ``running`` and nobody runs it.
Recovery returns it to pending (or fails it, on its last attempt), through
`Outcomes.recover_expired` (what `Queue.recover_expired` runs), which also counts and reports
each recovered job.

A `Service` (`sqla_queue.services`): a `RecoveryConfig`, validated when it is built;
`Recoverer.run_once()`, one bounded batch, returning a `RecoveryResult`; `Recoverer.run()`,
batches until caught up; and `Recoverer.run_if_due()`, the periodic pass a worker's claim loop
makes, at most `max_rounds` batches every `interval`.
Recovery is safe beside other workers and other recoverers: SKIP LOCKED splits the work.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any

from .. import _validate
from ..core import Core
from ..errors import ConfigurationError
from ..types import DEFAULT_LEASE

DEFAULT_BATCH_LIMIT = 100
DEFAULT_MAX_ROUNDS = 10
MIN_DEFAULT_INTERVAL = 1.0


@dataclass(frozen=True)
class RecoveryConfig:
    """How to recover and how often; validated at construction (`ConfigurationError`).

    :param lease: a running job whose lease (database time) is older than this is recovered;
        the same duration the workers renew (a ``timedelta`` or seconds). Default 60 s.
    :param batch_limit: the most jobs of each kind (requeued, failed) one batch takes back,
        each batch in transactions of its own. Default 100.
    :param max_rounds: the most batches a worker's periodic pass runs, so a backlog of expired
        leases never stalls its claim loop; `Recoverer.run` has no cap. Default 10.
    :param interval: seconds between a worker's passes. Default ``lease / 2``, at least 1 s:
        a job whose worker died waits at most about a lease and a half.
    """

    lease: timedelta = DEFAULT_LEASE
    batch_limit: int = DEFAULT_BATCH_LIMIT
    max_rounds: int = DEFAULT_MAX_ROUNDS
    interval: float | None = None

    def __post_init__(self) -> None:
        lease = _validate.as_config(_validate.duration, self.lease, "lease", positive=True)
        object.__setattr__(self, "lease", lease)
        _validate.config_positive_int(self.batch_limit, "batch_limit")
        _validate.config_positive_int(self.max_rounds, "max_rounds")
        if self.interval is None:
            interval = max(MIN_DEFAULT_INTERVAL, lease.total_seconds() / 2)
        else:
            interval = _validate.as_config(_validate.duration, self.interval, "interval", positive=True).total_seconds()
        object.__setattr__(self, "interval", interval)

    @classmethod
    def build(cls, **options: Any) -> RecoveryConfig:
        """Like the constructor, with "did you mean" for a misspelt option."""
        _validate.known_options(options, [f.name for f in fields(cls)], "recovery")
        return cls(**options)


@dataclass(frozen=True)
class RecoveryResult:
    """What a run recovered: the ids of the jobs requeued or failed (`Queue.recover_expired`
    returns them together), the batches it took, and whether it caught up (its last batch came
    back short of `batch_limit`, so nothing expired was left behind)."""

    recovered: tuple[int, ...] = ()
    batches: int = 0
    caught_up: bool = True

    def __add__(self, other: RecoveryResult) -> RecoveryResult:
        return RecoveryResult(recovered=self.recovered + other.recovered,
                              batches=self.batches + other.batches, caught_up=other.caught_up)


class Recoverer:
    """Recovers expired leases on `core`'s table, as `config` says."""

    def __init__(self, core: Core, config: RecoveryConfig | None = None) -> None:
        if config is None:
            config = RecoveryConfig()
        if not isinstance(config, RecoveryConfig):
            raise ConfigurationError(f"recovery must be a RecoveryConfig, got {type(config).__name__}")
        self.outcomes = core.outcomes
        self.config = config
        self._next_run = 0.0

    def run_once(self) -> RecoveryResult:
        """One batch: at most `batch_limit` jobs of each kind."""
        return self.run(max_rounds=1)

    def next_due(self) -> float:
        return self._next_run

    def run(self, max_rounds: int | None = None) -> RecoveryResult:
        """Batches until caught up (a batch came back short of `batch_limit`), or `max_rounds`."""
        total = RecoveryResult()
        while max_rounds is None or total.batches < max_rounds:
            ids = self.outcomes.recover_expired(self.config.lease, self.config.batch_limit)
            total += RecoveryResult(recovered=tuple(ids), batches=1,
                                    caught_up=len(ids) < self.config.batch_limit)
            if total.caught_up:
                break
        return total

    def run_if_due(self) -> RecoveryResult | None:
        """A worker's periodic pass: at most `max_rounds` batches every `interval` seconds.

        Unlike pruning, the next pass is scheduled only once this one succeeded: a pass that
        fails (the error reaches the worker's loop, which backs off) is tried again on the
        loop's next round, since jobs stuck behind a dead worker wait for it."""
        if time.monotonic() < self._next_run:
            return None
        result = self.run(max_rounds=self.config.max_rounds)
        self._next_run = time.monotonic() + self.config.interval
        return result
