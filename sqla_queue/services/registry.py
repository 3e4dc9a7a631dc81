"""A worker's row in the worker registry (`tables.workers_table`): written once the worker's
first rounds are done (at most a second after its first claim), on every beat of the lease
keeper, and deleted on a clean exit.

One statement each time, in autocommit (`Executor.single_statement`): the beat adds one round
trip per ``lease / 3`` to a worker, whatever its queues and jobs. The registry is for operators
(`sqla-queue workers`, the dashboard, doctor, the Prometheus gauge), so a write that fails never
stops the worker: it is logged (a warning the first time, then at debug level until a write
succeeds again) and the next beat tries again. A worker that cannot write its row (a role
without the grant, a schema before sqlaq_0010) keeps working and shows as absent, which doctor
reports.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..core import Core
from ..errors import DatabaseError

logger = logging.getLogger("sqla_queue.worker")

DEAD_WORKER_RETENTION = timedelta(days=1)
"""How long a dead worker's row stays (shown as dead) before a starting worker deletes it."""


@dataclass(frozen=True)
class WorkerDescription:
    """What a worker says about itself in the registry."""

    worker_id: str
    queues: tuple[str, ...]
    tasks: tuple[str, ...]
    concurrency: int
    lease: timedelta
    host: str = ""
    pid: int = 0
    version: str = ""

    @classmethod
    def of_this_process(cls, worker_id: str, queues: Sequence[str], tasks: Sequence[str], concurrency: int,
                        lease: timedelta) -> WorkerDescription:
        return cls(worker_id=worker_id, queues=tuple(queues), tasks=tuple(sorted(tasks)), concurrency=concurrency,
                   lease=lease, host=socket.gethostname(), pid=os.getpid(), version=_version())

    def params(self) -> dict[str, Any]:
        return {"worker_id": self.worker_id, "host": self.host, "pid": self.pid, "version": self.version,
                "queues": list(self.queues), "tasks": list(self.tasks), "concurrency": self.concurrency,
                "lease": self.lease}


class WorkerRegistration:
    """The registry row of the worker `description` describes; `stopping` (set once the worker
    drains) turns its state from ``running`` to ``stopping``."""

    def __init__(self, core: Core, description: WorkerDescription, *, stopping: threading.Event | None = None,
                 retention: timedelta = DEAD_WORKER_RETENTION) -> None:
        self.statements = core.statements
        self.executor = core.executor
        self.description = description
        self._stopping = stopping
        self._retention = retention
        self._failing = False

    @property
    def state(self) -> str:
        return "stopping" if self._stopping is not None and self._stopping.is_set() else "running"

    def register(self) -> bool:
        """Insert the row (sweeping workers dead for a day in the same statement), on the
        connection the claim loop's rounds keep (`Executor.round_connection`): the worker
        registers from its claim loop once the start-up's first rounds are done."""
        return self._write("register", self.statements.register_worker,
                           {**self.description.params(), "state": self.state, "retention": self._retention},
                           on=self.executor.round_connection)

    def beat(self) -> bool:
        """Refresh the row: alive for one more lease from now, with the current state."""
        return self._write("heartbeat", self.statements.beat_worker,
                           {**self.description.params(), "state": self.state})

    def remove(self) -> bool:
        """Delete the row: the worker exits cleanly."""
        return self._write("remove", self.statements.remove_worker, {"worker_id": self.description.worker_id})

    def _write(self, what: str, statement: Any, params: dict[str, Any], *, on: Any = None) -> bool:
        try:
            with (on or self.executor.single_statement)() as conn:
                conn.execute(statement, params)
        except DatabaseError as exc:
            log = logger.debug if self._failing else logger.warning
            log("worker %s: registry %s failed (the worker goes on; sqla-queue workers and doctor will not "
                "see it until a write succeeds): %s", self.description.worker_id, what, exc)
            self._failing = True
            return False
        self._failing = False
        return True


def _version() -> str:
    """The installed sqla-queue's version (read once per worker start)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sqla-queue")
    except PackageNotFoundError:
        return "unknown"
