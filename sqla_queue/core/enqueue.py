"""The enqueue machinery behind `Queue.enqueue` and `Queue.enqueue_many`.

Validation turns the caller's jobs into the INSERT's parallel columns, looking up what it can
once per call (tasks, the idempotency-key hooks). The INSERT then runs on the caller's
connection, in our own READ COMMITTED transaction, or (on an engine we built from a URL, when
the statement is all the call can write) alone in autocommit on the driver connection: one
round trip. Keys an active job holds are resolved to that job's id, racing holders included.

The workers' wake-up: an INSERT in the caller's transaction notifies as it commits; one in a
transaction of ours commits without a NOTIFY and is announced right after by the Queue's
`Notifier`, so concurrent enqueues do not commit one at a time (see `sql.insert_jobs`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection
from sqlalchemy.pool import PoolProxiedConnection

# The event payloads (`types.JobEnqueued`) load with the first event built.
from .. import _validate, types, workflow
from .._tasks import EnqueueOptions, Handler, Task, TaskRegistry
from ..db.engine import database_errors
from ..db.executor import ARRAY_PARAMS, DriverStatements, Executor
from ..db.notifier import Notifier
from ..errors import EnqueueConflictError, InvalidInputError, UnknownTaskError
from ..plugins.calls import emit_each, idempotency_key_asker, job_meta_asker
from ..sql import channel_name
from ..sql.enqueue import INPUT_COLUMNS
from .workflows import Dependencies, refuse_keys, write_graph

if TYPE_CHECKING:  # annotations only: the ORM is the caller's to import (`db.kinds`)
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

_ENQUEUE_ROUNDS = 5
_ENQUEUE_OPTIONS = frozenset(
    {"task", "payload", "queue", "run_at", "delay", "max_attempts", "idempotency_key", "priority", "meta",
     "group_key", "depends_on", "on_dependency_failure"}
)

_NO_DELAY = timedelta(0)


def enqueue_options(options: dict[str, Any], where: str) -> dict[str, Any]:
    """`options` checked for names `EnqueueOptions` does not have (a TypeError, as a function
    with those keywords would raise)."""
    unknown = sorted(set(options) - EnqueueOptions.__optional_keys__)
    if unknown:
        raise TypeError(f"{where} got unexpected keyword argument(s) {', '.join(map(repr, unknown))}")
    return options


class _Jobs:
    """Validated jobs as the INSERT's parallel columns (`sql.enqueue.INPUT_COLUMNS` order), and
    what validating them looks up once per call instead of once per job."""

    __slots__ = ("ask_key", "ask_meta", "columns", "deps", "keyed", "many", "resolved")

    def __init__(self, ask_key: Callable[..., str | None], ask_meta: Callable[..., dict[str, Any] | None] | None) -> None:
        self.columns: tuple[list[Any], ...] = tuple([] for _ in INPUT_COLUMNS)
        self.keyed = 0  # jobs with an idempotency key
        self.ask_key = ask_key  # plugins.calls.idempotency_key_asker: task option, then the hook
        self.ask_meta = ask_meta  # plugins.calls.job_meta_asker; None: no hook implemented
        self.resolved: dict[Any, tuple[Any, Task]] = {}
        self.many = False  # enqueue_many: items may name earlier ones (`workflow.Earlier`)
        self.deps: dict[int, Dependencies] = {}  # by index: the jobs that have dependencies

    def __len__(self) -> int:
        return len(self.columns[0])

    @property
    def queues(self) -> list[str]:
        return self.columns[0]

    @property
    def tasks(self) -> list[str]:
        return self.columns[1]

    @property
    def keys(self) -> list[str | None]:
        return self.columns[6]

    @property
    def metas(self) -> list[str | None]:
        return self.columns[9]


def _insert_params(jobs: _Jobs, todo: Sequence[int], channel: str, notify: bool) -> tuple[bool, dict[str, Any]]:
    """``(one, params)`` for the jobs at `todo`: `sql.insert_job`'s scalars for one job, else
    `sql.insert_jobs`' arrays; `notify`: whether the INSERT itself wakes the workers."""
    columns = jobs.columns if len(todo) == len(jobs) else tuple([col[i] for i in todo] for col in jobs.columns)
    one = len(todo) == 1
    params = ({name: column[0] for name, column in zip(INPUT_COLUMNS, columns)} if one
              else dict(zip(ARRAY_PARAMS, columns)))
    params["channel"] = channel
    params["notify"] = notify
    return one, params


def _ids_by_input(rows: Sequence[Any], params: dict[str, Any]) -> list[int | None]:
    """The INSERT's ``(id, idempotency_key, ...)`` rows in input order, None for a skipped job.

    Identity values ascend in insert order, which is input order (see sql.insert_jobs):
    keyless rows map by position among keyless inputs, keyed rows by their key.
    """
    keys = params["idempotency_keys"] if "idempotency_keys" in params else [params["idempotency_key"]]
    if len(rows) == len(keys) and not any(keys):
        return sorted(row[0] for row in rows)
    by_key = {row[1]: row[0] for row in rows if row[1] is not None}
    keyless = iter(sorted(row[0] for row in rows if row[1] is None))
    return [by_key.get(key) if key is not None else next(keyless) for key in keys]


def _meta_of(jobs: _Jobs, given: Mapping[str, Any] | None, task: Task, payload: Any, *options: Any) -> str | None:
    """The job's ``meta`` as JSON text: the hooks' keys, then the caller's ``meta=`` over them;
    None when neither gives any."""
    if given is not None:
        given = _validate.meta(given)
    added = jobs.ask_meta(task, payload, *options) if jobs.ask_meta is not None else None
    merged = {**(added or {}), **(given or {})}
    return _validate.meta_json(merged) if merged else None


class Enqueuer:
    """Validates jobs for `tasks` and inserts them through `executor`, resolving idempotency
    keys and announcing each job to `plugin_manager`. `Queue.enqueue` and
    `Queue.enqueue_many` delegate here."""

    def __init__(self, executor: Executor, tasks: TaskRegistry, plugin_manager: Any,
                 max_payload_bytes: int) -> None:
        self.executor = executor
        self.tasks = tasks
        self.plugin_manager = plugin_manager
        self.max_payload_bytes = max_payload_bytes
        self.statements = executor.statements
        self.channel = channel_name(executor.table)
        self.notifier = Notifier(self._send_wake_ups)
        self.fair_queues: set[str] = set()
        """Queues a single enqueue found fair: theirs go straight to the INSERT with turns (a
        hint only; `sql.insert_job` is right for any queue)."""

    def enqueue(self, task: Task | Handler | str, payload: Any, options: dict[str, Any],
                session: Session | None, connection: Connection | None) -> int:
        jobs = self._new_batch()
        self._prepare(jobs, task, payload, **options)
        return self._enqueue_specs(jobs, session=session, connection=connection)[0]

    def enqueue_many(self, jobs: Any, session: Session | None, connection: Connection | None) -> list[int]:
        batch = self._new_batch(many=True)
        for index, job in enumerate(jobs):
            self._prepare_mapping(batch, index, job)
        return self._enqueue_specs(batch, session=session, connection=connection) if len(batch) else []

    def _new_batch(self, many: bool = False) -> _Jobs:
        jobs = _Jobs(idempotency_key_asker(self.plugin_manager), job_meta_asker(self.plugin_manager))
        jobs.many = many
        return jobs

    def _prepare_mapping(self, jobs: _Jobs, index: int, job: Mapping[str, Any]) -> None:
        if not isinstance(job, Mapping):
            raise InvalidInputError(f"jobs[{index}] must be a mapping, got {type(job).__name__}")
        if not _ENQUEUE_OPTIONS.issuperset(job):
            unknown = sorted(set(job) - _ENQUEUE_OPTIONS)
            raise InvalidInputError(
                f"jobs[{index}] has unknown option(s) {', '.join(unknown)}; "
                f"allowed: {', '.join(sorted(_ENQUEUE_OPTIONS))}"
            )
        for required in ("task", "payload"):
            if required not in job:
                raise InvalidInputError(f"jobs[{index}] is missing {required!r}")
        try:
            if len(job) == 2:  # task and payload only: the common case, no option lookups
                self._prepare(jobs, job["task"], job["payload"])
            else:
                self._prepare(
                    jobs, job["task"], job["payload"], queue=job.get("queue"),
                    run_at=job.get("run_at"), delay=job.get("delay"),
                    max_attempts=job.get("max_attempts"), idempotency_key=job.get("idempotency_key"),
                    priority=job.get("priority"), meta=job.get("meta"), group_key=job.get("group_key"),
                    depends_on=job.get("depends_on"), on_dependency_failure=job.get("on_dependency_failure"),
                )
        except (InvalidInputError, UnknownTaskError) as exc:
            raise type(exc)(f"jobs[{index}]: {exc}") from None

    def _prepare(
        self,
        jobs: _Jobs,
        task: Task | Handler | str,
        payload: Any,
        *,
        queue: str | None = None,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
        priority: int | None = None,
        meta: Mapping[str, Any] | None = None,
        scheduled_at: datetime | None = None,
        group_key: str | None = None,
        depends_on: Any = None,
        on_dependency_failure: Any = None,
    ) -> None:
        """Validate one job and append it to `jobs`: nothing is appended if a check fails.
        `scheduled_at` is the scheduler's (`sqla_queue.core.schedules`): the tick the job is for."""
        registered = self._resolve_task(jobs, task)
        deps = None
        if depends_on is not None or on_dependency_failure is not None:
            deps = Dependencies(workflow.depends_on(() if depends_on is None else depends_on,
                                                    len(jobs) if jobs.many else None),
                                workflow.on_dependency_failure(on_dependency_failure or "cancel"))
        payload_json = _validate.payload_json(payload)
        limit = registered.max_payload_bytes or self.max_payload_bytes
        if len(payload_json) > limit:
            raise _validate.payload_too_large(registered.name, len(payload_json), limit)
        # A registered task's queue and max_attempts were validated when it was registered.
        queue_name = registered.queue if queue is None else _validate.queue_name(queue)
        attempts = (
            registered.max_attempts if max_attempts is None else _validate.max_attempts(max_attempts)
        )
        if run_at is None and delay is None:
            when, wait = None, _NO_DELAY
        else:
            when, wait = _validate.schedule(run_at, delay)
        if idempotency_key is None:
            idempotency_key = jobs.ask_key(registered, payload, queue_name, attempts, run_at, delay)
        if idempotency_key is not None:
            idempotency_key = _validate.idempotency_key(idempotency_key)
            jobs.keyed += 1
        rank = registered.priority if priority is None else _validate.priority(priority)
        if meta is not None or jobs.ask_meta is not None:
            meta = _meta_of(jobs, meta, registered, payload, queue_name, attempts, run_at, delay)
        for column, value in zip(
            jobs.columns,
            (queue_name, registered.name, payload_json, when, wait, attempts, idempotency_key, rank, scheduled_at,
             meta, None if group_key is None else _validate.group_key(group_key)),
        ):
            column.append(value)
        if deps is not None and deps.refs:
            jobs.deps[len(jobs) - 1] = deps

    def _resolve_task(self, jobs: _Jobs, task: Task | Handler | str) -> Task:
        """`TaskRegistry.resolve`, remembered for the rest of the call (a handler is found by a
        scan of the registry). An entry keeps its object, so a recycled id() never matches."""
        key = task if type(task) is str else id(task)
        hit = jobs.resolved.get(key)
        if hit is not None and (hit[0] is task or type(task) is str):
            return hit[1]
        registered = self.tasks.resolve(task)
        jobs.resolved[key] = (task, registered)
        return registered

    async def enqueue_async(self, task: Task | Handler | str, payload: Any, options: dict[str, Any],
                            session: AsyncSession | None, connection: AsyncConnection | None) -> int:
        jobs = self._new_batch()
        self._prepare(jobs, task, payload, **options)
        return (await self._enqueue_specs_async(jobs, session, connection))[0]

    async def enqueue_many_async(self, jobs: Any, session: AsyncSession | None,
                                 connection: AsyncConnection | None) -> list[int]:
        batch = self._new_batch(many=True)
        for index, job in enumerate(jobs):
            self._prepare_mapping(batch, index, job)
        return await self._enqueue_specs_async(batch, session, connection) if len(batch) else []

    def _enqueue_specs(
        self,
        jobs: _Jobs,
        *,
        session: Session | None,
        connection: Connection | None,
    ) -> list[int]:
        if session is not None or connection is not None:
            with self.executor.callers(session, connection) as conn:
                done = self._write(jobs, conn, None, notify=True)
            return self._announced(jobs, done)
        if jobs.deps:
            with self.executor.callers(None, None) as conn:
                done = self._write(jobs, conn, None, notify=False)
            self._wake_after_commit(jobs, done)
            return self._announced(jobs, done)
        done = self._enqueue_in_autocommit(jobs)
        if done is None:
            with self.executor.callers(None, None) as conn:
                done = self._write(jobs, conn, None, notify=False)
        self._wake_after_commit(jobs, done)
        return self._announced(jobs, done)

    def _wake_after_commit(self, jobs: _Jobs, done: tuple[list[int], list[bool]]) -> None:
        """Hand the queues that gained a job to the notifier (`_notifier`): our transaction
        committed without a NOTIFY, so it never queued behind other enqueues' commits."""
        inserted = {queue for queue, deduplicated in zip(jobs.queues, done[1]) if not deduplicated}
        if inserted:
            self.notifier.announce(inserted)

    def _send_wake_ups(self, queues: list[str]) -> None:
        """On the notifier's thread: one statement, compiled once where the engine is ours."""
        with self.executor.autocommit_enqueue() as autocommit:
            if autocommit is not None:
                pooled, fast = autocommit
                fast.wake_queues.rows(pooled, {"queues": queues})
                return
        with self.executor.single_statement() as conn:
            conn.execute(self.statements.wake_queues, {"queues": queues}).all()

    async def _enqueue_specs_async(self, jobs: _Jobs, session: AsyncSession | None,
                                   connection: AsyncConnection | None) -> list[int]:
        """The synchronous face's `_write`, run by the executor on an asyncio connection. The
        INSERT notifies in its transaction, ours included (the notifier's thread needs the
        synchronous engine)."""
        done = await self.executor.run_async(lambda conn, fast: self._write(jobs, conn, fast, notify=True),
                                             session, connection)
        return self._announced(jobs, done)

    def _announced(self, jobs: _Jobs, done: tuple[list[int], list[bool]]) -> list[int]:
        ids, deduplicated = done
        emit_each(self.plugin_manager, "sqla_queue_job_enqueued", (
            types.JobEnqueued(job_id=job_id, queue=queue, task=task, deduplicated=dup,
                              meta=json.loads(meta) if meta is not None else None)
            for queue, task, job_id, dup, meta in zip(jobs.queues, jobs.tasks, ids, deduplicated, jobs.metas)
        ))
        return ids

    def _write(self, jobs: _Jobs, target: Connection | PoolProxiedConnection,
               fast: DriverStatements | None, *, notify: bool) -> tuple[list[int], list[bool]]:
        """Insert `jobs` on `target` and resolve their keys: through SQLAlchemy on a caller's
        connection, with the compiled statements (`fast`) on a connection of our own. With
        `notify`, the INSERT wakes the workers when its transaction commits."""
        channel = self.channel
        if jobs.deps:  # `core.workflows`: on the SQLAlchemy connection (asyncio's included)
            refuse_keys(jobs.keys)
            ids = write_graph(target, self.statements, jobs.columns, jobs.deps,  # type: ignore[arg-type]
                              channel=channel, notify=notify)
            return ids, [False] * len(ids)

        if fast is None:
            def insert(todo: Sequence[int]) -> list[int | None]:
                return self._insert(target, jobs, todo, notify)  # type: ignore[arg-type]

            def active_holders(keys: list[str]) -> dict[str, int]:
                return self._active_holders(target, keys)  # type: ignore[arg-type]
        else:
            def insert(todo: Sequence[int]) -> list[int | None]:
                one, params = _insert_params(jobs, todo, channel, notify)
                if one:
                    return self._insert_one(params, lambda unless_fair: (
                        fast.insert_one_unless_fair if unless_fair else fast.insert_one).rows(target, params))
                return _ids_by_input(fast.insert.rows(target, params), params)

            def active_holders(keys: list[str]) -> dict[str, int]:
                return dict(fast.find_keys.rows(target, {"keys": keys}))

        return self._insert_resolving_keys(jobs, insert, active_holders)

    def _insert_resolving_keys(
        self,
        jobs: _Jobs,
        insert: Callable[[Sequence[int]], list[int | None]],
        active_holders: Callable[[list[str]], dict[str, int]],
    ) -> tuple[list[int], list[bool]]:
        """Insert, then resolve each key that an active job holds to that job's id.

        `insert` writes the jobs at the given indexes (`_insert`), `active_holders` looks keys
        up (`_active_holders`), both on the connection the call uses. A key's holder can finish
        between our INSERT (which skipped the row) and our lookup (which then finds nothing);
        those jobs go round again. Every job ends with an id.
        """
        keys = jobs.keys
        if not jobs.keyed:  # nothing can conflict: one INSERT, every job inserted
            return insert(range(len(jobs))), [False] * len(jobs)  # type: ignore[return-value]
        ids: list[int | None] = [None] * len(jobs)
        deduplicated = [False] * len(jobs)
        first_with_key: dict[str, int] = {}
        todo: list[int] = []
        for index, key in enumerate(keys):
            if key is not None and key in first_with_key:
                continue  # a repeat within this batch shares the first one's job
            if key is not None:
                first_with_key[key] = index
            todo.append(index)
        firsts = set(first_with_key.values())
        for _ in range(_ENQUEUE_ROUNDS):
            if not todo:
                break
            inserted = insert(todo)
            for index, job_id in zip(todo, inserted):
                ids[index] = job_id
            held = [keys[i] for i, job_id in zip(todo, inserted) if job_id is None]
            holders = active_holders(held) if held else {}
            todo = []
            for index, job_id in enumerate(ids):
                if job_id is None and index in firsts:
                    key = keys[index]
                    if key in holders:
                        ids[index], deduplicated[index] = holders[key], True
                    else:
                        todo.append(index)
        if todo:
            raise EnqueueConflictError(
                "could not insert or find the active job for idempotency key(s) "
                f"{', '.join(repr(keys[i]) for i in todo[:5])}; "
                "is the enqueuing transaction REPEATABLE READ or SERIALIZABLE?"
            )
        for index, key in enumerate(keys):
            if ids[index] is None:
                ids[index] = ids[first_with_key[key]]  # type: ignore[index]
                deduplicated[index] = True
        return [int(job_id) for job_id in ids], deduplicated  # type: ignore[arg-type]

    def _insert(self, conn: Connection, jobs: _Jobs, todo: Sequence[int], notify: bool) -> list[int | None]:
        """Ids of the jobs at `todo` (ascending indexes), None where an active job holds the key."""
        one, params = _insert_params(jobs, todo, self.channel, notify)

        def rows(statement: Any) -> list[Any]:
            with database_errors():
                return conn.execute(statement, params).all()

        if one:
            return self._insert_one(params, lambda unless_fair: rows(
                self.statements.insert_one_unless_fair if unless_fair else self.statements.insert_one))
        return _ids_by_input(rows(self.statements.insert), params)

    def _insert_one(self, params: dict[str, Any], rows: Callable[[bool], list[Any]]) -> list[int | None]:
        """One job, with `rows(unless_fair)` running `sql.insert_job_unless_fair` (True) or
        `sql.insert_job`: the light INSERT first, unless its queue was found fair before, and
        the INSERT with turns when the light one finds the queue fair (it wrote nothing then)."""
        queue = params["queue_name"]
        if queue not in self.fair_queues:
            found = rows(True)
            if not found[0].fair:
                return _ids_by_input([row for row in found if row.id is not None], params)
            self.fair_queues.add(queue)
        return _ids_by_input(rows(False), params)

    def _active_holders(self, conn: Connection, keys: list[str]) -> dict[str, int]:
        with database_errors():
            rows = conn.execute(self.statements.find_keys, {"keys": keys}).all()
        return {row.idempotency_key: row.id for row in rows}

    def _enqueue_in_autocommit(self, jobs: _Jobs) -> tuple[list[int], list[bool]] | None:
        """Enqueue without a transaction of ours, if this engine and connection allow it; None
        (nothing done) otherwise, and the caller uses our own READ COMMITTED transaction.

        On an engine we built from a URL (`make_engine`), a pooled connection whose session
        defaults to READ COMMITTED runs the INSERT in autocommit (`Executor.autocommit_enqueue`):
        that statement is atomic by itself, one round trip instead of three. Only when it is all
        the call can write: one job (a skipped insert wrote nothing, whatever the key lookup
        after it finds), or jobs without keys (one statement, no lookup). A batch with keys, a
        session with another default, or an application's engine keep our own transaction, so
        nothing is ever half-written.
        """
        if len(jobs) != 1 and jobs.keyed:
            return None
        with self.executor.autocommit_enqueue() as autocommit:
            if autocommit is None:
                return None
            pooled, fast = autocommit
            return self._write(jobs, pooled, fast, notify=False)
