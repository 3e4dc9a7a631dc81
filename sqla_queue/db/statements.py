"""Every statement sqla_queue runs on a job table, built once per table and claim order, and the
hot ones compiled for the driver.

`Statements` is the one place statements are kept: the queue's, the worker's, the operator's,
the testing helpers' and doctor's. Each is built on first use (`_Built`): a process that only
enqueues builds two. `DriverStatements` compiles the hot ones for psycopg (`driver`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cached_property, lru_cache
from typing import Any

from sqlalchemy import Table
from sqlalchemy.engine import Dialect

from .. import sql
from ..sql import catalog, time_travel
from ..sql import counters as counter_sql
from ..sql import dependencies as dependency_sql
from ..sql import jobs as job_sql
from ..sql import limits as limits_sql
from ..sql import operator_actions as ops_sql
from ..sql import prune as prune_sql
from ..sql import queues as queues_sql
from ..sql import samples as samples_sql
from ..sql import schedules as schedule_sql
from ..sql import stats as stats_sql
from ..sql import workers as workers_sql
from ..sql.claim import DEFAULT_ORDER, ClaimOrder, claim_job_by_id
from ..sql.claim.fair import claim_fair_jobs
from ..sql.claim.limited import claim_limited_jobs
from ..sql.enqueue import INPUT_COLUMNS
from ..sql.notify import listen_finished
from ..states import FINISHED, JobStatus
from ..tables import counters_table, group_rates_table, limits_table, queues_table, samples_table, workers_table
from .driver import DriverStatement
from .statement_cache import StatementCache

__all__ = ["ARRAY_PARAMS", "DriverStatements", "Statements"]

ARRAY_PARAMS = tuple(f"{name}s" for name in INPUT_COLUMNS)
"""`sql.insert_jobs`' array parameters, one per input column."""


class _Built:
    """A `Statements` attribute built on first use and then kept: a process that only enqueues
    (a web request, a script) builds two statements, not every one the worker and the operator
    commands run -- building them all took longer than the first enqueue itself. Two threads
    racing on first use each build one; they are equal, and the later one is kept."""

    def __init__(self, build: Callable[[Statements], Any]) -> None:
        self.build = build

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, statements: Statements | None, owner: type) -> Any:
        if statements is None:
            return self
        value = statements.__dict__[self.name] = self.build(statements)
        return value


class Statements:
    """Every Core statement sqla_queue runs on one job table (and its counters table), one
    instance per table (`for_table`), each statement built on first use (`_Built`)."""

    def __init__(self, table: Table, order: ClaimOrder = DEFAULT_ORDER) -> None:
        self.table = table
        self.order = order
        self._variants: dict[tuple, Any] = {}
        self._variants_lock = threading.Lock()

    counters = _Built(lambda s: counters_table(s.table))
    queues = _Built(lambda s: queues_table(s.table))
    samples = _Built(lambda s: samples_table(s.table))
    workers = _Built(lambda s: workers_table(s.table))
    limits = _Built(lambda s: limits_table(s.table))
    group_rates = _Built(lambda s: group_rates_table(s.table))

    # enqueue
    insert = _Built(lambda s: sql.insert_jobs(s.table))
    insert_one = _Built(lambda s: sql.insert_job(s.table))
    insert_one_unless_fair = _Built(lambda s: sql.insert_job_unless_fair(s.table))
    find_keys = _Built(lambda s: sql.find_active_keys(s.table))
    wake_queues = _Built(lambda s: sql.wake_queues(s.table))
    # workflows
    insert_graph = _Built(lambda s: sql.insert_jobs(s.table, graph=True))
    lock_dependencies = _Built(lambda s: dependency_sql.lock_dependencies(s.table))
    link_dependencies = _Built(lambda s: dependency_sql.link_dependencies(s.table))
    dependency_results = _Built(lambda s: dependency_sql.dependency_results(s.table))
    dependency_counts = _Built(lambda s: dependency_sql.dependency_counts(s.table))
    dependencies_of = _Built(lambda s: dependency_sql.dependencies_of(s.table))
    dependents_of = _Built(lambda s: dependency_sql.dependents_of(s.table))
    lock_waiting_dependents = _Built(lambda s: dependency_sql.lock_waiting_dependents(s.table))
    recount_waiting = _Built(lambda s: dependency_sql.recount_waiting(s.table))
    settle_waiting = _Built(lambda s: dependency_sql.recount_waiting(s.table, backstop=True))
    # claim, outcomes, leases, recovery
    claim = _Built(lambda s: sql.claim_jobs(s.table, order=s.order))
    complete_and_claim = _Built(lambda s: sql.complete_and_claim_jobs(s.table, order=s.order))
    complete_and_claim_from = _Built(lambda s: sql.complete_and_claim_jobs(s.table, from_position=True, order=s.order))
    complete = _Built(lambda s: sql.complete_job(s.table))
    complete_in_handler_transaction = _Built(lambda s: sql.complete_in_handler_transaction(s.table))
    complete_many = _Built(lambda s: sql.complete_jobs_announced(s.table))
    retry = _Built(lambda s: sql.retry_job(s.table))
    fail = _Built(lambda s: sql.fail_job(s.table))
    snooze = _Built(lambda s: sql.snooze_job(s.table))
    requeue_expired = _Built(lambda s: sql.requeue_expired(s.table))
    fail_expired = _Built(lambda s: sql.fail_exhausted_expired(s.table))
    cancel_expired = _Built(lambda s: sql.cancel_expired(s.table))
    select_job = _Built(lambda s: sql.select_job(s.table))
    watch_job = _Built(lambda s: sql.watch_job(s.table))
    claim_state = _Built(lambda s: sql.claim_state(s.table))
    renew = _Built(lambda s: sql.renew_leases(s.table))
    release = _Built(lambda s: sql.release_jobs(s.table))
    listen = _Built(lambda s: sql.listen(s.table))
    listen_finished = _Built(lambda s: listen_finished(s.table))
    # counters
    count_events = _Built(lambda s: counter_sql.count_events(s.counters))
    count_empty = _Built(lambda s: counter_sql.count_empty_claim(s.table, s.counters))
    # operator reads and writes
    now = _Built(lambda s: stats_sql.database_now())
    health = _Built(lambda s: stats_sql.queue_health(s.table))
    completed_in_window = _Built(lambda s: stats_sql.completed_in_window(s.table))
    failed_in_window = _Built(lambda s: stats_sql.failed_in_window(s.table))
    counted_in_window = _Built(lambda s: stats_sql.counted_in_window(s.counters))
    job_state = _Built(lambda s: ops_sql.job_state(s.table))
    key_holder = _Built(lambda s: ops_sql.active_key_holder(s.table))
    retry_failed = _Built(lambda s: ops_sql.retry_failed_job(s.table))
    # queue control
    pause = _Built(lambda s: queues_sql.pause_queue(s.queues))
    resume = _Built(lambda s: queues_sql.resume_queue(s.queues))
    queue_states = _Built(lambda s: queues_sql.queue_states(s.table, s.queues))
    queue_state = _Built(lambda s: queues_sql.queue_states(s.table, s.queues, one=True))
    paused_queues = _Built(lambda s: queues_sql.paused_queues(s.queues))
    # flow control (the limited claim: `limited_claim`)
    set_limits = _Built(lambda s: limits_sql.set_limits(s.limits))
    ensure_limits = _Built(lambda s: limits_sql.ensure_limits(s.limits))
    clear_limits = _Built(lambda s: limits_sql.clear_limits(s.limits))
    clear_group_rates = _Built(lambda s: limits_sql.clear_group_rates(s.group_rates))
    all_limits = _Built(lambda s: limits_sql.all_limits(s.limits))
    lock_limits = _Built(lambda s: limits_sql.lock_limits(s.limits))
    claim_lock = _Built(lambda s: limits_sql.lock_limits_to_claim(s.limits))
    fair_claim = _Built(lambda s: claim_fair_jobs(s.table, order=s.order))
    turn_bases = _Built(lambda s: limits_sql.turn_bases(s.table))
    tag_pending_turns = _Built(lambda s: limits_sql.tag_pending_turns(s.table))
    cancelled_in_window = _Built(lambda s: stats_sql.cancelled_in_window(s.table))
    cancel = _Built(lambda s: ops_sql.cancel_job(s.table))
    # the dashboard's reads: history, workers
    record_sample = _Built(lambda s: samples_sql.record_sample(s.table, s.counters, s.samples))
    history = _Built(lambda s: samples_sql.history(s.samples))
    queue_history = _Built(lambda s: samples_sql.history(s.samples, by_queue=True))
    workers_seen = _Built(lambda s: stats_sql.workers_seen(s.table))
    # the worker registry: each worker's own row, the operators' list, doctor's question
    register_worker = _Built(lambda s: workers_sql.register(s.workers))
    beat_worker = _Built(lambda s: workers_sql.beat(s.workers))
    remove_worker = _Built(lambda s: workers_sql.remove(s.workers))
    list_workers = _Built(lambda s: workers_sql.list_workers(s.table, s.workers))
    eligible_demand = _Built(lambda s: workers_sql.eligible_demand(s.table, s.workers, s.queues))
    # schedules
    advance_schedule = _Built(lambda s: schedule_sql.advance_schedule(s.table))
    schedule_last_tick_locked = _Built(lambda s: schedule_sql.last_tick_locked(s.table))
    schedule_last_ticks = _Built(lambda s: schedule_sql.last_ticks(s.table))
    schedule_tick_pending = _Built(lambda s: schedule_sql.tick_pending(s.table))
    # retention: one statement per finished state (`states.FINISHED`), and the counters
    prune = _Built(lambda s: {
        **{state.value: prune_sql.prune_finished(s.table, state) for state in FINISHED},
        "counters": counter_sql.prune_counters(s.counters),
    })
    prune_live = _Built(lambda s: {state.value: prune_sql.prune_finished(s.table, state, live_only=True)
                                   for state in FINISHED})
    # doctor: the claim it EXPLAINs (the one in use, in its order)
    claim_plan = _Built(lambda s: catalog.explain(sql.claim_jobs(s.table, order=s.order)))
    # the testing helpers (`sqla_queue.testing`): claim one job by id, time travel, reads
    claim_by_id = _Built(lambda s: claim_job_by_id(s.table))
    claim_due_by_id = _Built(lambda s: claim_job_by_id(s.table, due_only=True))
    advance_due = _Built(lambda s: time_travel.advance_due_jobs(s.table))
    due_jobs = _Built(lambda s: job_sql.due_jobs(s.table, s.order))
    pending_queues = _Built(lambda s: job_sql.pending_queues(s.table))
    delete_queue_jobs = _Built(lambda s: job_sql.delete_queue_jobs(s.table))

    @staticmethod
    @lru_cache(maxsize=64)
    def for_table(table: Table, order: ClaimOrder = DEFAULT_ORDER) -> Statements:
        return Statements(table, order)

    def pending_jobs(self, by_task: bool, by_queue: bool, by_payload: bool) -> Any:
        """`sqla_queue.testing.enqueued`'s read for this combination of filters."""
        return self._variant(job_sql.pending_jobs, by_task=by_task, by_queue=by_queue, by_payload=by_payload)

    def list_jobs(self, status: JobStatus | None, by_queue: bool, by_task: bool, paged: bool,
                  created_after: bool = False, created_before: bool = False) -> Any:
        """The `list_jobs` page statement for this combination of filters."""
        return self._variant(ops_sql.list_jobs, status=status, by_queue=by_queue, by_task=by_task, paged=paged,
                             created_after=created_after, created_before=created_before)

    def limited_claim(self, grouped: bool, fair: bool) -> Any:
        """`sql.claim.limited.claim_limited_jobs`, one per shape (fair implies grouped)."""
        return self._variant(claim_limited_jobs, grouped=grouped or fair, fair=fair, order=self.order)

    def retry_jobs(self, **filters: bool) -> Any:
        """The bulk retry statement for this combination of filters (`ops_sql.retry_failed_jobs`)."""
        return self._variant(ops_sql.retry_failed_jobs, **filters)

    def cancel_jobs(self, statuses: tuple[JobStatus, ...], **filters: bool) -> Any:
        """The bulk cancel statement for these statuses and filters (`ops_sql.cancel_jobs`)."""
        return self._variant(ops_sql.cancel_jobs, statuses, **filters)

    def count_matching(self, statuses: tuple[JobStatus, ...], **filters: bool) -> Any:
        """How many jobs a bulk action's filter matches (`ops_sql.count_matching`)."""
        return self._variant(_count_matching, statuses, **filters)

    def _variant(self, build: Callable[..., Any], *args: Any, **flags: Any) -> Any:
        """A statement whose shape depends on which filters a call gives, built once per shape."""
        key = (build, args, tuple(sorted(flags.items())))
        statement = self._variants.get(key)
        if statement is None:
            with self._variants_lock:
                statement = self._variants.setdefault(key, build(self.table, *args, **flags))
        return statement


def _count_matching(table: Table, statuses: tuple[JobStatus, ...], **filters: bool) -> Any:
    return ops_sql.count_matching(table, ops_sql.bulk_filter(table, statuses, **filters))


class DriverStatements:
    """The hot statements compiled for a psycopg dialect (`_driver.DriverStatement`), each on
    first use: an enqueuing process compiles the INSERT, not the worker's round. What a compile
    derives is kept on disk (`statement_cache`), so the next process skips building and
    compiling the statement."""

    def __init__(self, statements: Statements, dialect: Dialect, cache: StatementCache | None = None) -> None:
        self.statements = statements
        self.dialect = dialect
        self.cache = cache
        self._limited: dict[tuple[bool, bool], DriverStatement] = {}

    def _compiled(self, name: str, sample: dict[str, Any], binary: tuple[str, ...] = (),
                  build: Callable[[], Any] | None = None) -> DriverStatement:
        """Statement `name` (a `Statements` attribute unless `build` makes it), from the cache
        when it has it."""
        build = build or (lambda: getattr(self.statements, name))
        key = self.cache.key(name, self.statements.table, self.dialect, self.statements.order, sample, binary) \
            if self.cache is not None else None
        saved = self.cache.load(key) if key is not None else None
        if saved is not None:
            try:
                return DriverStatement.restored(saved, build, self.dialect, sample)
            except (KeyError, TypeError, ValueError):  # not an entry this code wrote: compile it again
                pass
        compiled = DriverStatement(build(), self.dialect, sample, binary=binary)
        if key is not None and (entry := compiled.saved()) is not None:
            self.cache.store(key, entry)
        return compiled

    @cached_property
    def round(self) -> DriverStatement:
        return self._compiled("complete_and_claim", _ROUND_SAMPLE)

    @cached_property
    def round_from(self) -> DriverStatement:
        return self._compiled("complete_and_claim_from", {
            **_ROUND_SAMPLE, "from_priority": [], "from_run_at": [], "from_id": [],
        })

    @cached_property
    def complete_many(self) -> DriverStatement:
        return self._compiled("complete_many", {"job_ids": [], "tokens": [], "results": []})

    @cached_property
    def insert_one(self) -> DriverStatement:
        return self._compiled("insert_one", {**dict.fromkeys(INPUT_COLUMNS), "channel": "", "notify": True})

    @cached_property
    def insert_one_unless_fair(self) -> DriverStatement:
        return self._compiled("insert_one_unless_fair",
                              {**dict.fromkeys(INPUT_COLUMNS), "channel": "", "notify": True})

    @cached_property
    def insert(self) -> DriverStatement:
        return self._compiled("insert", {**dict.fromkeys(ARRAY_PARAMS, []), "channel": "", "notify": True},
                              ARRAY_PARAMS)

    @cached_property
    def find_keys(self) -> DriverStatement:
        return self._compiled("find_keys", {"keys": []})

    @cached_property
    def wake_queues(self) -> DriverStatement:
        return self._compiled("wake_queues", {"queues": []}, ("queues",))

    @cached_property
    def claim_lock(self) -> DriverStatement:
        return self._compiled("claim_lock", {"queue": ""})

    @cached_property
    def fair_claim(self) -> DriverStatement:
        return self._compiled("fair_claim", _LIMITED_SAMPLE)

    def limited_claim(self, grouped: bool, fair: bool) -> DriverStatement:
        """`Statements.limited_claim`, compiled once per shape."""
        key = (grouped or fair, fair)
        compiled = self._limited.get(key)
        if compiled is None:
            compiled = self._limited[key] = self._compiled(
                f"limited_claim_{key[0]}_{key[1]}", _LIMITED_SAMPLE, build=lambda: self.statements.limited_claim(*key))
        return compiled


_LIMITED_SAMPLE = {
    "queue": "", "worker_id": "", "limit": 0, "token": "", "lease": None, "tasks": None,
    "max_running": None, "max_running_per_key": None, "per_second": None, "burst": None, "ahead": None,
    "group_per_second": None, "group_burst": None, **{f"known_{name}": None for name in limits_sql.LIMIT_COLUMNS},
}
_ROUND_SAMPLE = {"queues": [], "tasks": None, "worker_id": "", "limit": 0, "token": "", "lease": None,
                 "job_ids": [], "tokens": [], "results": []}


