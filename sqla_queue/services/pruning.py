"""Retention: delete finished jobs (and old event counters) in bounded batches.

A `Service` (`sqla_queue.services`, after River's job cleaner): a `PruneConfig`, validated
when it is built; `Pruner.run_once()`, one bounded batch of each kind, returning a
`PruneResult` that tests assert on; `Pruner.run()`, batches until caught up (``sqla-queue
prune``); and `Pruner.run_if_due()`, the periodic pass a worker's claim loop makes.

Why prune at all: a queue table is update-heavy and mostly finished jobs. Finished rows keep
the table, its primary key and the finished-at indexes big,
so vacuum has more to scan and more pages compete for cache. Deleting them in small batches
leaves dead tuples that autovacuum turns into reusable space; the table stops growing instead
of shrinking (only ``VACUUM FULL`` or pg_repack return space to the OS). See
docs/how-to/operations.md, "Retention, vacuum and bloat".
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any

from .. import _validate
from ..core import Core
from ..errors import ConfigurationError, InvalidInputError
from ..states import FINISHED
from .archiving import History

logger = logging.getLogger("sqla_queue.maintenance")

DEFAULT_BATCH_SIZE = 1000
DEFAULT_COUNTERS_AFTER = timedelta(days=1)
DEFAULT_PRUNE_INTERVAL = 60.0
DEFAULT_MAX_BATCHES = 10
MAX_BATCH_SIZE = 100_000
JOB_KINDS = tuple(state.value for state in FINISHED)
"""The finished states pruned (`states.FINISHED`), each by its own time (``completed_at``,
``failed_at``, ``cancelled_at``); `PruneConfig` has a ``<kind>_after`` field for each."""
JOB_KINDS_AFTER = tuple(f"{kind}_after" for kind in JOB_KINDS)


@dataclass(frozen=True)
class PruneConfig:
    """What to prune and how hard; validated at construction (`ConfigurationError`).

    :param completed_after: delete completed jobs that completed longer ago than this
        (a ``timedelta`` or seconds). None (the default) keeps them.
    :param failed_after: the same for failed jobs, by the time they failed. Keep them longer
        than completed ones: they are what an operator inspects and retries. Default None.
    :param cancelled_after: the same for cancelled jobs, by the time they were cancelled.
        Default None.
    :param counters_after: delete event counters (expired leases, retries, empty claims) older
        than this. Default one day; the stats window is minutes.
    :param batch_size: the most rows one statement deletes, each batch in a transaction of its
        own, so row locks, WAL bursts and replica lag stay small. Default 1000.
    :param max_batches: the most batches of each kind a worker's periodic pass deletes, so a
        backlog never stalls its claim loop; `Pruner.run` has no cap. Default 10.
    :param interval: seconds between a worker's pruning passes. Default 60.
    """

    completed_after: timedelta | None = None
    failed_after: timedelta | None = None
    cancelled_after: timedelta | None = None
    counters_after: timedelta = DEFAULT_COUNTERS_AFTER
    batch_size: int = DEFAULT_BATCH_SIZE
    max_batches: int = DEFAULT_MAX_BATCHES
    interval: float = DEFAULT_PRUNE_INTERVAL

    def __post_init__(self) -> None:
        for name in (*JOB_KINDS_AFTER, "counters_after"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _validate.as_config(_validate.duration, value, name, positive=True))
        if all(getattr(self, name) is None for name in JOB_KINDS_AFTER):
            raise ConfigurationError("pruning needs completed_after, failed_after or cancelled_after (any of them)")
        _validate.as_config(_validate.positive_int, self.batch_size, "batch_size")
        if self.batch_size > MAX_BATCH_SIZE:
            raise ConfigurationError(f"batch_size must be at most {MAX_BATCH_SIZE}, got {self.batch_size}")
        _validate.as_config(_validate.positive_int, self.max_batches, "max_batches")
        _validate.positive_seconds(self.interval, "interval", error=ConfigurationError)

    @classmethod
    def build(cls, **options: Any) -> PruneConfig:
        """Like the constructor, with "did you mean" for a misspelt option."""
        _validate.known_options(options, [f.name for f in fields(cls)], "pruning")
        return cls(**options)


@dataclass(frozen=True)
class PruneResult:
    """Rows deleted: completed, failed and cancelled jobs, counter rows; and the statements it
    took. (`cancelled` came last, after the fields it joined.)"""

    completed: int = 0
    failed: int = 0
    counters: int = 0
    batches: int = 0
    cancelled: int = 0

    def __add__(self, other: PruneResult) -> PruneResult:
        return PruneResult(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    @property
    def jobs(self) -> int:
        return self.completed + self.failed + self.cancelled


class Pruner:
    """Deletes what `config` says is old enough, from `core`'s table."""

    def __init__(self, core: Core, config: PruneConfig) -> None:
        if not isinstance(config, PruneConfig):
            raise ConfigurationError(f"pruning must be a PruneConfig, got {type(config).__name__}")
        self.executor = core.executor
        self.config = config
        self._ages = {kind: getattr(config, f"{kind}_after") for kind in JOB_KINDS}
        self.history = History(core.executor.table)
        self._next_run = 0.0

    def run_once(self) -> PruneResult:
        """One batch of each configured job kind, then the old counters; each batch its own
        transaction."""
        return self.run(max_batches=1)

    def next_due(self) -> float:
        return self._next_run

    def run(self, max_batches: int | None = None) -> PruneResult:
        """Batches until every kind is caught up (a batch came back short of `batch_size`), or
        `max_batches` of each kind. Safe beside workers and other pruners: SKIP LOCKED splits
        the work and leaves a row someone holds for the next batch.

        On a partitioned table (`sqla_queue.ops.storage`) the archived jobs go a day at a time:
        each day partition of a state whose whole day is older than the state's age is dropped,
        unless an active job depends on one of its jobs; the batches then delete only what is
        not archived yet."""
        with self.executor.transaction() as conn:
            partitioned = self.history.partitioned(conn)
        total = self._drop_expired() if partitioned else PruneResult()
        statements = self.executor.statements.prune_live if partitioned else self.executor.statements.prune
        todo = {kind: age for kind, age in self._ages.items() if age is not None}
        rounds = 0
        while todo and (max_batches is None or rounds < max_batches):
            step = {kind: self._batch(statements[kind], age) for kind, age in todo.items()}
            total += PruneResult(**step, batches=len(step))
            todo = {kind: age for kind, age in todo.items() if step[kind] >= self.config.batch_size}
            rounds += 1
        counters = self._delete(self.executor.statements.prune["counters"], {"age": self.config.counters_after})
        return total + PruneResult(counters=counters, batches=1)

    def run_if_due(self) -> PruneResult | None:
        """A worker's periodic pass: at most `max_batches` of each kind every `interval` s.

        The next pass is scheduled before this one runs, so a pass that fails (the error
        reaches the worker's loop, which backs off) is not retried at once."""
        now = time.monotonic()
        if now < self._next_run:
            return None
        self._next_run = now + self.config.interval
        result = self.run(max_batches=self.config.max_batches)
        if result.jobs or result.counters:
            logger.info("pruned %d completed, %d failed and %d cancelled job(s), %d counter row(s) from %s",
                        result.completed, result.failed, result.cancelled, result.counters,
                        self.executor.table.name)
        return result

    def _batch(self, statement: Any, age: timedelta) -> int:
        return self._delete(statement, {"age": age, "limit": self.config.batch_size})

    def _delete(self, statement: Any, params: dict[str, Any]) -> int:
        with self.executor.transaction() as conn:
            return int(conn.execute(statement, params).scalar_one())

    def _drop_expired(self) -> PruneResult:
        """Each expired day partition counted and dropped, in a transaction of its own."""
        dropped = dict.fromkeys(JOB_KINDS, 0)
        for state in FINISHED:
            age = self._ages[state.value]
            if age is None:
                continue
            with self.executor.transaction() as conn:
                expired = self.history.expired(conn, state, age)
            for name in expired:
                with self.executor.transaction() as conn:
                    dropped[state.value] += self.history.drop(conn, name)
                logger.info("dropped history partition %s", name)
        return PruneResult(**dropped, batches=sum(1 for n in dropped.values() if n))


def prune(core: Core, **options: Any) -> PruneResult:
    """`Queue.prune`: build a config from `options` (bad ones raise `InvalidInputError`, since
    they are a call's arguments, not a worker's configuration) and prune until caught up."""
    try:
        config = PruneConfig.build(**options)
    except ConfigurationError as exc:
        raise InvalidInputError(str(exc)) from None
    return Pruner(core, config).run()
