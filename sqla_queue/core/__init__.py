"""What a Queue is made of: the `Core`.

`Queue` is the facade users call; the `Core` is the same queue as the parts the rest of the
package uses (the worker, the services, the testing helpers and tools above the facade): the
executor (its table, statements and transaction modes), the task registry and the schedules,
the plugin manager, and the objects that do the work, each on that one executor:

* `Enqueuer` (`core.enqueue`): validation, idempotency keys, the INSERT;
* `Outcomes` (`core.outcomes`): claims, fenced outcomes, leases, recovery;
* `Operations` (`core.operations`): stats, listing, operator actions, history;
* `Counters` (`core.counters`): the hot-path event counters;
* `Limits` (`core.limits`): queue limits, stored and enforced by the limited claim.

Services and the worker take a `Core`, never a `Queue`: the layers below the facade do not
reach back up through it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, Table

from .._tasks import TaskRegistry
from ..db.executor import Executor, Statements
from ..types import CancelSignal, ClaimedJob
from ..workflow import WorkflowReads
from .counters import Counters, EmptyClaimThrottle
from .enqueue import Enqueuer
from .handler_transaction import HandlerSessions, HandlerTransaction
from .limits import Limits
from .operations import Operations
from .outcomes import Outcomes
from .schedules import Schedule, Schedules
from .workflows import batch_of, dependency_results

__all__ = ["Core"]


class Core:
    """One queue's parts on one executor (see the module's docs)."""

    def __init__(self, executor: Executor, tasks: TaskRegistry, schedules: Schedules, plugin_manager: Any, *,
                 max_payload_bytes: int, max_result_bytes: int, throttle: EmptyClaimThrottle | None = None) -> None:
        self.executor = executor
        self.tasks = tasks
        self.schedules = schedules
        self.plugin_manager = plugin_manager
        self.counters = Counters(executor.statements, throttle or EmptyClaimThrottle())
        self.enqueuer = Enqueuer(executor, tasks, plugin_manager, max_payload_bytes)
        self.outcomes = Outcomes(executor, plugin_manager, self.counters, max_result_bytes=max_result_bytes)
        self.operations = Operations(executor, plugin_manager)
        self.limits = Limits(executor, self.counters)
        self.outcomes.limits = self.limits

    def on_engine(self, engine: Engine, *, call_timeout: float | None = None) -> Core:
        """The same queue (table, tasks, schedules, plugins, empty-claim tally) running its
        statements on `engine`, each call under a client-side deadline of `call_timeout`
        seconds (None: none): a worker's engine, the command line's."""
        return Core(self.executor.on_engine(engine, call_timeout=call_timeout), self.tasks, self.schedules,
                    self.plugin_manager, max_payload_bytes=self.enqueuer.max_payload_bytes,
                    max_result_bytes=self.outcomes.max_result_bytes, throttle=self.counters.throttle)

    def rebound(self, engine_or_url: Any) -> Core:
        """The same queue on another database, `engine_or_url` adopted as `Queue` adopts its
        engine (an Engine, an AsyncEngine or a URL): what `sqla_queue.testing.bind` runs on."""
        return Core(Executor.adopt(engine_or_url, self.table, self.executor.order), self.tasks, self.schedules,
                    self.plugin_manager, max_payload_bytes=self.enqueuer.max_payload_bytes,
                    max_result_bytes=self.outcomes.max_result_bytes, throttle=self.counters.throttle)

    @property
    def table(self) -> Table:
        return self.executor.table

    @property
    def statements(self) -> Statements:
        return self.executor.statements

    @property
    def engine(self) -> Engine:
        """The engine our statements run on (a READ COMMITTED view of the one given)."""
        return self.executor.engine

    def handler_sessions(self) -> HandlerSessions:
        """Where ``ctx.transaction()`` opens its sessions: this core's engine (the application's,
        for a Queue's own core) and its asyncio engine."""
        return HandlerSessions(self.executor.engine, self.executor)

    def handler_transaction(self, job: ClaimedJob, cancel_requested: CancelSignal, sessions: HandlerSessions,
                            *, on_settled: Callable[[str], bool] | None = None) -> HandlerTransaction:
        """What ``ctx.transaction()`` returns for one run of `job`; `on_settled` hears
        ``"completed"`` or ``"lost"`` the moment a block settles the job, and answers False if
        the runner had given the job up before."""
        return HandlerTransaction(self.outcomes, job, self.tasks.get(job.task), sessions, cancel_requested,
                                  max_result_bytes=self.outcomes.max_result_bytes, on_settled=on_settled)

    @functools.cached_property
    def workflow_reads(self) -> WorkflowReads:
        """What reads ``ctx.dependency_results`` and ``ctx.batch`` when a handler asks (most
        never do): one for every job this core runs, each context asking with its job's id."""
        return WorkflowReads(functools.partial(self._workflow_read, dependency_results),
                             functools.partial(self._workflow_read, batch_of))

    def _workflow_read(self, read: Callable[..., Any], job_id: int) -> Any:
        with self.executor.transaction() as conn:
            return read(conn, self.statements, job_id)

    def declared_queues(self) -> list[str]:
        """Every queue a registered task or a schedule puts jobs on, sorted: what a worker
        told no queues serves."""
        names = {task.queue for task in map(self.tasks.get, self.tasks.names()) if task is not None}
        return sorted(names | {self.schedule_queue(schedule) for schedule in self.schedules.all()})

    def schedule_queue(self, schedule: Schedule) -> str:
        """The queue `schedule`'s ticks go to: its own, else its task's."""
        if schedule.queue is not None:
            return schedule.queue
        task = self.tasks.get(schedule.task)
        return "default" if task is None else task.queue  # a schedule's task is registered with it

    def enqueue_tick(self, schedule: Schedule, tick: datetime, connection: Connection) -> int:
        """The job of one tick of `schedule` in the scheduler's transaction (`connection`): due
        at the tick, its ``scheduled_at`` the tick, validated and announced like any enqueue."""
        options = {"queue": schedule.queue, "run_at": tick, "priority": schedule.priority, "scheduled_at": tick}
        return self.enqueuer.enqueue(schedule.task, schedule.payload, options, None, connection)
