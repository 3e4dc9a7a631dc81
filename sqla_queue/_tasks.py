"""The task registry behind ``@queue.task``: handler names, default queue and attempts, and
the per-task strategy options, which `_plugins` asks before calling any plugin."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypedDict, TypeVar, Union, Unpack

from . import _validate
from .errors import ConfigurationError, DuplicateTaskError, PluginError, UnknownTaskError
from .types import JobContext
from .workflow import Earlier

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

Handler = Callable[..., Any]
P = TypeVar("P", bound=Mapping[str, Any])
"""A task's payload type, as its handler's first parameter declares it."""
ExceptionTypes = tuple[type[BaseException], ...]
RetryDelay = Union[timedelta, Callable[[int, BaseException], "timedelta | Literal[False] | None"]]
"""A fixed delay between attempts, or ``(attempt, error) -> timedelta | False | None``."""
KeyFunction = Callable[[Mapping[str, Any]], "str | None"]
"""``payload -> key or None``: the task's own dedupe key."""


class EnqueueOptions(TypedDict, total=False):
    """The per-job options of `Queue.enqueue` (and its asyncio face, `Task.enqueue`, and each
    `enqueue_many` item), one definition for all of them.

    `queue` and `max_attempts` (default: the task's); `run_at` (a timezone-aware datetime) or
    `delay` (a timedelta or seconds) for a later due time; `idempotency_key` (while an active
    job holds it, enqueue returns that job's id); `priority` (-32768 to 32767, default the
    task's: higher is claimed first); `meta` (a mapping of string keys to JSON values stored
    with the job and read by its handler as ``ctx.meta``, over what the `sqla_queue_job_meta`
    hooks add); `group_key` (the job's group, e.g. a tenant: the queue's per-key limits and
    fair claiming apply to it, `Queue.set_limits`); `depends_on` (ids of jobs, or in
    ``enqueue_many`` `Earlier` items of the same call, that must finish first: the job waits
    until then, docs/how-to/workflows.md) and `on_dependency_failure` (``"cancel"``, the
    default: cancelled when one of them fails for good or is cancelled; ``"run"``: run anyway)."""

    queue: str | None
    run_at: datetime | None
    delay: timedelta | float | None
    max_attempts: int | None
    idempotency_key: str | None
    priority: int | None
    meta: Mapping[str, Any] | None
    group_key: str | None
    depends_on: Iterable[int | Earlier] | None
    on_dependency_failure: Literal["cancel", "run"] | None


@dataclass(frozen=True)
class Task(Generic[P]):
    """A registered handler, typed by its payload: ``task.enqueue(payload)`` is checked against
    the handler's first parameter. Calling it calls the handler directly (handy in tests)."""

    name: str
    handler: Callable[[P, JobContext], Any]
    queue: str
    max_attempts: int
    timeout: timedelta | None = None
    retry_delay: RetryDelay | None = None
    idempotency_key: KeyFunction | None = None
    max_payload_bytes: int | None = None
    """This task's payload limit (encoded JSON bytes); None: the queue's."""
    is_async: bool = False
    """The handler is a coroutine function: the worker runs it on its event loop."""
    priority: int = 0
    """The priority of this task's jobs when `enqueue` names none (higher runs first)."""
    max_snoozes: int = _validate.DEFAULT_MAX_SNOOZES
    """How often one job may snooze (`sqla_queue.Snooze`); past it the attempt fails."""
    session_factory: Callable[[], Any] | None = None
    """Makes the session of ``ctx.transaction()`` (a ``sessionmaker``, an
    ``async_sessionmaker`` for an async handler); None: one on the queue's engine."""
    retry_on: ExceptionTypes | None = None
    """Only these exceptions may be retried (None: any); another fails the job at once."""
    no_retry_on: ExceptionTypes = ()
    """These exceptions fail the job at once, even inside `retry_on`."""
    owner: Any = field(default=None, repr=False, compare=False)
    """The Queue that registered this task: where `enqueue` puts its jobs."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.handler(*args, **kwargs)

    def enqueue(self, payload: P, *, session: Session | None = None, connection: Connection | None = None,
                **options: Unpack[EnqueueOptions]) -> int:
        """`Queue.enqueue` of this task: ``send_email.enqueue({"to": ...})``."""
        return self._owner("enqueue").enqueue(self, payload, session=session, connection=connection, **options)

    async def enqueue_async(self, payload: P, *, session: AsyncSession | None = None,
                            connection: AsyncConnection | None = None, **options: Unpack[EnqueueOptions]) -> int:
        """`Queue.enqueue_async` of this task."""
        return await self._owner("enqueue_async").enqueue_async(
            self, payload, session=session, connection=connection, **options)

    def _owner(self, method: str) -> Any:
        if self.owner is None:
            raise ConfigurationError(f"task {self.name!r} belongs to no Queue: use queue.{method}(task, payload)")
        return self.owner

    def own_retryable(self, error: BaseException) -> Literal[False] | None:
        """False when ``retry_on=``/``no_retry_on=`` rule `error` out; None defers to the plugins."""
        if isinstance(error, self.no_retry_on):
            return False
        if self.retry_on is not None and not isinstance(error, self.retry_on):
            return False
        return None

    def own_retry_delay(self, attempt: int, error: BaseException) -> timedelta | Literal[False] | None:
        """This task's ``retry_delay=`` for a failed attempt; None defers to the plugins.

        A callable that raises or answers outside the hook's contract is a `PluginError`
        naming the task: the same contract as ``sqla_queue_retry_delay``.
        """
        rule = self.retry_delay
        if rule is None or isinstance(rule, timedelta):
            return rule
        try:
            answer = rule(attempt, error)
        except Exception as exc:
            raise PluginError(f"retry_delay of task {self.name!r} raised {exc!r}") from exc
        if answer is None or answer is False or (isinstance(answer, timedelta) and answer >= timedelta(0)):
            return answer
        raise PluginError(
            f"retry_delay of task {self.name!r} returned {type(answer).__name__} "
            f"{answer!r:.60}; expected a non-negative timedelta, False or None"
        )

    def own_idempotency_key(self, payload: Mapping[str, Any]) -> str | None:
        """This task's ``idempotency_key=`` for a payload; None defers to the plugins."""
        if self.idempotency_key is None:
            return None
        try:
            key = self.idempotency_key(payload)
        except Exception as exc:
            raise PluginError(f"idempotency_key of task {self.name!r} raised {exc!r}") from exc
        if key is not None and not (isinstance(key, str) and key):
            raise PluginError(
                f"idempotency_key of task {self.name!r} returned {type(key).__name__}; "
                "expected a non-empty str or None"
            )
        return key


class TaskOptions(TypedDict, total=False):
    """``@queue.task``'s options (docs/reference/api.md has each one's meaning).

    `queue` (default ``"default"``) and `max_attempts` (5) are its jobs' defaults; `timeout`
    bounds one attempt; `retry_delay` (a timedelta, seconds, or ``(attempt, error) ->
    timedelta | False | None``) and `idempotency_key` (``payload -> str | None``) are its own
    strategies, asked before any plugin; `max_payload_bytes` replaces the queue's limit;
    `priority` is its jobs' priority when `enqueue` names none; `max_snoozes` bounds how often
    one job may snooze; `session_factory` makes the session of ``ctx.transaction()``;
    `retry_on` (exception classes) are the only errors worth a retry and `no_retry_on` the
    errors never worth one: either fails the job on that attempt."""

    name: str | None
    queue: str
    max_attempts: int
    timeout: timedelta | float | None
    retry_delay: RetryDelay | float | None
    idempotency_key: KeyFunction | None
    max_payload_bytes: int | None
    priority: int
    max_snoozes: int
    session_factory: Callable[[], Any] | None
    retry_on: type[BaseException] | tuple[type[BaseException], ...] | None
    no_retry_on: type[BaseException] | tuple[type[BaseException], ...] | None


TASK_DEFAULTS: TaskOptions = {"name": None, "queue": "default", "max_attempts": 5, "timeout": None,
                              "retry_delay": None, "idempotency_key": None, "max_payload_bytes": None,
                              "priority": 0, "max_snoozes": _validate.DEFAULT_MAX_SNOOZES, "session_factory": None,
                              "retry_on": None, "no_retry_on": None}


class TaskDecorator(Protocol):
    """What ``@queue.task(...)`` returns: registers a handler, keeping its payload type."""

    def __call__(self, func: Callable[[P, JobContext], Any], /) -> Task[P]: ...


def task_options(options: dict[str, Any], *, where: str = "@queue.task()") -> dict[str, Any]:
    """`options` over `TASK_DEFAULTS`; an unknown name is a TypeError, as for a function."""
    unknown = sorted(set(options) - set(TASK_DEFAULTS))
    if unknown:
        raise TypeError(f"{where} got unexpected keyword argument(s) {', '.join(map(repr, unknown))}")
    return {**TASK_DEFAULTS, **options}


class TaskRegistry:
    def __init__(self) -> None:
        self._tasks: dict[str, Task[Any]] = {}

    def register(
        self,
        handler: Handler,
        *,
        name: str | None,
        queue: str,
        max_attempts: int,
        timeout: timedelta | float | None = None,
        retry_delay: RetryDelay | float | None = None,
        idempotency_key: KeyFunction | None = None,
        max_payload_bytes: int | None = None,
        priority: int = 0,
        max_snoozes: int = _validate.DEFAULT_MAX_SNOOZES,
        session_factory: Callable[[], Any] | None = None,
        retry_on: Any = None,
        no_retry_on: Any = None,
        owner: Any = None,
    ) -> Task[Any]:
        if not callable(handler):
            raise TypeError(f"@queue.task needs a callable, got {type(handler).__name__}")
        _refuse_async_generator(handler, name)
        task_name = _validate.name(
            _default_name(handler) if name is None else name, "task name"
        )
        if task_name in self._tasks and self._tasks[task_name].handler is not handler:
            raise DuplicateTaskError(f"task {task_name!r} is already registered to another handler")
        task = Task(
            name=task_name,
            handler=handler,
            queue=_validate.queue_name(queue),
            max_attempts=_validate.max_attempts(max_attempts),
            timeout=None if timeout is None else _validate.duration(timeout, "timeout", positive=True),
            retry_delay=_retry_delay_option(retry_delay, task_name),
            idempotency_key=_key_option(idempotency_key, task_name),
            max_payload_bytes=None if max_payload_bytes is None else _validate.config_positive_int(
                max_payload_bytes, f"max_payload_bytes of task {task_name!r}"
            ),
            is_async=is_async_handler(handler),
            priority=_validate.as_config(_validate.priority, priority, f"priority of task {task_name!r}"),
            max_snoozes=_validate.as_config(_validate.non_negative_int, max_snoozes,
                                            f"max_snoozes of task {task_name!r}"),
            session_factory=_session_factory_option(session_factory, task_name),
            **_retry_classes(retry_on, no_retry_on, task_name),
            owner=owner,
        )
        self._tasks[task_name] = task
        return task

    def resolve(self, task_or_name: Task[Any] | Handler | str) -> Task[Any]:
        """The registered task for a Task, a name, or the decorated function itself."""
        if isinstance(task_or_name, Task):
            name = task_or_name.name
        elif isinstance(task_or_name, str):
            name = task_or_name
        else:
            name = next((t.name for t in self._tasks.values() if t.handler is task_or_name), None)
            if name is None:
                raise UnknownTaskError(f"{task_or_name!r} is not a registered task")
        try:
            return self._tasks[name]
        except KeyError:
            known = ", ".join(sorted(self._tasks)) or "none"
            raise UnknownTaskError(f"unknown task {name!r} (registered: {known})") from None

    def get(self, name: str) -> Task[Any] | None:
        return self._tasks.get(name)

    def names(self) -> list[str]:
        return sorted(self._tasks)

    def __contains__(self, name: object) -> bool:
        return name in self._tasks


def is_async_handler(handler: Handler) -> bool:
    """True for a handler the worker must await: an ``async def`` function or method, a
    `functools.partial` of one, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(_function_of(handler)[1])


def _function_of(handler: Handler) -> tuple[Any, Any]:
    """``(what was wrapped, the function a call runs)``, through partials and ``__call__``."""
    target = handler
    while isinstance(target, functools.partial):
        target = target.func
    return target, target if inspect.isroutine(target) or inspect.isclass(target) else type(target).__call__


def _refuse_async_generator(handler: Handler, name: str | None) -> None:
    """An async generator has nothing to await to completion: its job could never finish."""
    target, call = _function_of(handler)
    if inspect.isasyncgenfunction(call):
        label = name if name is not None else getattr(target, "__name__", None) or type(target).__name__
        raise TypeError(
            f"task {label!r}: {_describe(handler)} is an async generator; a handler is a function "
            "or an async def coroutine function"
        )


def _describe(handler: Handler) -> str:
    if isinstance(handler, functools.partial):
        return "the functools.partial's function"
    return "the handler" if inspect.isroutine(handler) else f"{type(handler).__name__}.__call__"


def _default_name(handler: Handler) -> str:
    """The function's own name: short, and what the CLI's ``enqueue NAME`` expects."""
    name = getattr(handler, "__name__", None)
    if not name or name == "<lambda>":
        raise TypeError("@queue.task needs name= for a handler without a usable __name__")
    return name


def _retry_delay_option(value: Any, task_name: str) -> RetryDelay | None:
    """A timedelta (or seconds) is a fixed delay; a callable decides per attempt."""
    if value is None or callable(value):
        return value
    try:
        return _validate.duration(value, f"retry_delay of task {task_name!r}")
    except ValueError as exc:
        raise ConfigurationError(
            f"{exc}; or pass a callable (attempt, error) -> timedelta | False | None"
        ) from None


def _retry_classes(retry_on: Any, no_retry_on: Any, task_name: str) -> dict[str, Any]:
    """``retry_on``/``no_retry_on`` as tuples of exception classes, refused when they would
    retry nothing (``max_attempts=1`` says that) or name something that is not an exception."""
    only = None if retry_on is None else _exception_classes(retry_on, f"retry_on of task {task_name!r}")
    never = () if no_retry_on is None else _exception_classes(no_retry_on, f"no_retry_on of task {task_name!r}")
    if only == ():
        raise ConfigurationError(
            f"retry_on of task {task_name!r} is empty, so no error would be retried: "
            "use max_attempts=1 to never retry"
        )
    if only and never and all(issubclass(kind, never) for kind in only):
        raise ConfigurationError(
            f"every class in retry_on of task {task_name!r} is also in no_retry_on, so no error "
            "would be retried: use max_attempts=1 to never retry"
        )
    return {"retry_on": only, "no_retry_on": never}


def _exception_classes(value: Any, label: str) -> ExceptionTypes:
    """One exception class, or a tuple / list / set of them, as a tuple."""
    items = tuple(value) if isinstance(value, (tuple, list, set, frozenset)) else (value,)
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            got = f"{item.__name__} (not an exception)" if isinstance(item, type) else \
                f"{type(item).__name__} {item!r:.40}"
            raise ConfigurationError(
                f"{label} must be an exception class or a tuple of them, such as (TimeoutError, "
                f"ConnectionError); got {got}"
            )
    return items


def _key_option(value: Any, task_name: str) -> KeyFunction | None:
    if value is None or callable(value):
        return value
    raise ConfigurationError(
        f"idempotency_key of task {task_name!r} must be a callable payload -> str | None, got "
        f"{type(value).__name__}; a fixed key belongs to enqueue(idempotency_key=...)"
    )


def _session_factory_option(value: Any, task_name: str) -> Callable[[], Any] | None:
    if value is None or callable(value):
        return value
    raise ConfigurationError(
        f"session_factory of task {task_name!r} must be a callable returning a Session (a "
        f"sessionmaker; an async_sessionmaker for an async handler), got {type(value).__name__}"
    )
