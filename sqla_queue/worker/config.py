"""Worker options and the summary of a run: validated at construction, with "did you mean"
errors for misspelt options (see `WorkerConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine

from .. import _validate
from ..core.operations import DEFAULT_SAMPLE_RETENTION
from ..db.engine import parse_url
from ..errors import ConfigurationError
from ..services.pruning import PruneConfig
from ..services.sampling import DEFAULT_SAMPLE_INTERVAL
from ..types import DEFAULT_LEASE


@dataclass(frozen=True)
class WorkerConfig:
    """Worker options, validated at construction.

    :param queues: queue names to serve, claimed in turn (one statement for all of them).
        Default None: every queue a registered task or a schedule of the queue puts jobs on
        (`Core.declared_queues`), as they stand when the worker starts.
    :param concurrency: handler threads, and the most jobs held at once.
    :param batch_size: most jobs per claim statement (default: half of ``concurrency`` plus
        the prefetch, or 200 if that is more: docs/explanation/prefetch.md); a claim never asks
        for more than the free slots.
    :param prefetch: claimed jobs held beyond ``concurrency``, waiting in the worker for a free
        handler, so claims stay large while handlers run (docs/explanation/prefetch.md). They
        are ``running`` and leased like the others; a task's timeout starts when a handler
        takes the job. Default None: adapts to the handlers' observed durations, so that a
        buffered job waits about a second at most (slow handlers, small buffer). 0: none.
    :param prefetch_ttl: seconds a prefetched job may wait for a handler before it goes back to
        ``pending`` (its attempt handed back), for another worker to take. Default 5.
    :param lease: how long a claim stays valid without renewal; the same duration
        `Queue.recover_expired` uses. Default 60 s.
    :param poll_interval: seconds between claims when no notification arrives. Default 1.
    :param shutdown_grace: seconds running handlers get to finish after the first
        SIGTERM/SIGINT before their jobs are released. Default 30.
    :param call_timeout: client-side deadline for every database call, in seconds. Default
        ``min(lease / 4, 10)``.
    :param recovery_interval: seconds between lease-recovery passes
        (`sqla_queue.services.recovery.Recoverer`). Default ``lease / 2``, at least 1 s.
    :param listen: wake on LISTEN/NOTIFY (needs a direct connection, not PgBouncer in
        transaction mode: see `listen_engine`). Default True.
    :param listen_engine: where the listener connects, an Engine or a database URL: the same
        database reached directly while the worker's other connections go through PgBouncer in
        transaction mode (which cannot deliver notifications). Default None: the listener
        connects like the worker's other connections.
    :param prepared_statements: let psycopg prepare repeated statements server-side (faster),
        and set the worker's sessions to READ COMMITTED. Turn off behind PgBouncer in
        transaction mode (``--pgbouncer``): no prepared statements (PgBouncer before 1.21 loses
        them), no session setting (it would not follow the next statement). Default True.
    :param worker_id: recorded in ``locked_by``. Default ``host:pid:random``.
    :param engine: the engine whose way of connecting the worker's own connections copy
        (``connect_args``, ``do_connect`` listeners, ``creator``, pool ``connect`` listeners);
        default: the queue's. Pass a ``postgresql+psycopg`` engine here when the queue's engine
        uses another driver. The worker adds its keepalives, timeouts and pool size on top.
    :param pruning: a `sqla_queue.services.pruning.PruneConfig`: delete old finished jobs a few
        batches at a time from the claim loop. Default None (no pruning).
    :param sample_interval: seconds between the worker's samples of every queue into the
        history behind `Queue.history` (`sqla_queue.services.sampling.Sampler`): one statement each,
        and the first worker to sample a minute writes it. Default 60; None: no sampling.
    :param sample_retention: samples older than this are deleted when a new one is written
        (a ``timedelta`` or seconds). Default 7 days.
    """

    queues: tuple[str, ...] | None = None
    concurrency: int = 4
    batch_size: int | None = None
    prefetch: int | None = None
    prefetch_ttl: float = 5.0
    lease: timedelta = DEFAULT_LEASE
    poll_interval: float = 1.0
    shutdown_grace: float = 30.0
    call_timeout: float | None = None
    recovery_interval: float | None = None
    listen: bool = True
    listen_engine: Engine | str | None = field(default=None, compare=False)
    prepared_statements: bool = True
    worker_id: str | None = None
    engine: Engine | None = field(default=None, compare=False)
    pruning: PruneConfig | None = None
    sample_interval: float | None = DEFAULT_SAMPLE_INTERVAL
    sample_retention: timedelta = DEFAULT_SAMPLE_RETENTION

    @classmethod
    def build(cls, **options: Any) -> WorkerConfig:
        _validate.known_options(options, [f.name for f in fields(cls)], "worker")
        if isinstance(options.get("queues"), str):
            options["queues"] = tuple(q for q in options["queues"].split(",") if q)
        elif options.get("queues") is not None:
            options["queues"] = tuple(options["queues"])
        for name in ("lease", "sample_retention"):
            if name in options:
                options[name] = _validate.as_config(_validate.duration, options[name], name, positive=True)
        config = cls(**options)
        config.validate()
        return config

    def validate(self) -> None:
        if self.queues is not None and not self.queues:
            raise ConfigurationError(
                "queues must name at least one queue (or be None: every queue with a registered task)")
        for name in self.queues or ():
            _validate.as_config(_validate.name, name, "queue")
        _validate.config_positive_int(self.concurrency, "concurrency")
        if self.worker_id is not None:  # said now, not at run(), when it is first written
            _validate.as_config(_validate.name, self.worker_id, "worker_id")
        if self.engine is not None and not isinstance(self.engine, Engine):
            raise ConfigurationError(f"engine must be a sqlalchemy Engine, got {type(self.engine).__name__}")
        if self.listen_engine is not None:
            if not isinstance(self.listen_engine, (Engine, str)):
                raise ConfigurationError(
                    f"listen_engine must be a sqlalchemy Engine or a database URL, got {type(self.listen_engine).__name__}")
            if not self.listen:
                raise ConfigurationError("listen_engine is set but listen is False: the listener would never connect")
            if isinstance(self.listen_engine, str):
                parse_url(self.listen_engine)
        if self.pruning is not None and not isinstance(self.pruning, PruneConfig):
            raise ConfigurationError(f"pruning must be a PruneConfig, got {type(self.pruning).__name__}")
        if self.batch_size is not None:
            _validate.config_positive_int(self.batch_size, "batch_size")
        if self.prefetch is not None and (isinstance(self.prefetch, bool) or not isinstance(self.prefetch, int)
                                          or self.prefetch < 0):
            raise ConfigurationError(f"prefetch must be a whole number of jobs, 0 or more, got {self.prefetch!r}")
        for name in ("poll_interval", "shutdown_grace", "prefetch_ttl", "call_timeout", "recovery_interval", "sample_interval"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                raise ConfigurationError(f"{name} must be a positive number of seconds, got {value!r}")
        if self.call_timeout is not None and self.call_timeout >= self.lease.total_seconds():
            raise ConfigurationError("call_timeout must be shorter than the lease")

    @property
    def lease_seconds(self) -> float:
        return self.lease.total_seconds()

    @property
    def effective_call_timeout(self) -> float:
        return self.call_timeout or min(self.lease_seconds / 4, 10.0)

    @property
    def effective_batch_size(self) -> int | None:
        """Most jobs per claim; None: as many as there are free slots (prefetch included)."""
        return self.batch_size


@dataclass
class WorkerSummary:
    """What one `Worker.run` did."""

    claimed: int = 0
    completed: int = 0
    retried: int = 0
    failed: int = 0
    cancelled: int = 0
    snoozed: int = 0
    lost: int = 0
    released: int = 0
