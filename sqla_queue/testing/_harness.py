"""Plumbing shared by the conformance checks: a throwaway Queue, calls that ask one plugin
alone through that Queue's pluggy manager, the database clock, and cleanup of the jobs a
check wrote. Public API of sqla_queue only, as a plugin's own tests would use it."""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import Engine

from ..errors import ConfigurationError, PluginError
from ..hookspecs import OBSERVER_HOOKS, hookimpl
from ..queue import Queue

BUILTIN_STRATEGIES = ("sqla_queue.backoff", "sqla_queue.retryable")
"""The built-in strategy plugins (docs/reference/hooks.md), blocked where a check must see
the plugin's own answer and nothing a built-in would say in its place."""

Target = Engine | str | Queue


class ConformanceError(AssertionError):
    """A plugin broke its hook contract. The message names the plugin, the hook and the input.

    An `AssertionError`, so pytest reports it as a test failure with the message in full.
    """


def conformance_queue(target: Target, plugins: Iterable[object], blocked: Iterable[str] = ()) -> Queue:
    """A Queue on the target's database with only the given plugins (and the built-ins not
    `blocked`)."""
    if isinstance(target, Queue):
        return Queue(target.engine, model=target.model, plugins=plugins, load_entrypoints=False,
                     blocked_plugins=list(blocked))
    return Queue(target, plugins=plugins, load_entrypoints=False, blocked_plugins=list(blocked))


def plugin_queue(target: Target, plugin: object) -> Queue:
    """A Queue holding `plugin` and no built-in strategy, registered as any Queue would (a
    misspelt hook or argument, or a hook wrapper, fails here)."""
    try:
        return conformance_queue(target, [plugin], blocked=BUILTIN_STRATEGIES)
    except (ConfigurationError, PluginError) as exc:
        raise ConformanceError(f"the plugin cannot be registered: {exc}") from None


def registered_name(queue: Queue, plugin: object) -> str:
    """The name `queue` registered `plugin` under: the one its messages and listings use."""
    return queue.plugin_manager.get_name(plugin) or repr(plugin)


def implemented(queue: Queue, plugin: object) -> set[str]:
    """The hooks `plugin` implements, as `queue`'s plugin manager registered them."""
    return {caller.name for caller in queue.plugin_manager.get_hookcallers(plugin) or []}


def loads_on_install(queue: Queue, plugin: object) -> bool:
    """Whether an installed entry point holding `plugin` is registered by every Queue (it only
    observes) or only where it is enabled by name (it implements a strategy hook)."""
    return not implemented(queue, plugin) - set(OBSERVER_HOOKS)


def alone(queue: Queue, plugin: object, hook_name: str) -> Any:
    """`hook_name` of `queue`'s plugin manager with every other plugin left out: calling it asks
    `plugin` alone, through pluggy, with the arguments its implementation takes."""
    manager = queue.plugin_manager
    return manager.subset_hook_caller(hook_name, [p for p in manager.get_plugins() if p is not plugin])


def require_hook(queue: Queue, plugin: object, hook_name: str) -> Any:
    """The caller asking `plugin` alone; a ConformanceError if it does not implement the hook."""
    if hook_name not in implemented(queue, plugin):
        raise ConformanceError(f"plugin {registered_name(queue, plugin)!r} does not implement {hook_name}")
    return alone(queue, plugin, hook_name)


def unique_queue_name(kind: str) -> str:
    """Checks work on a queue of their own, so they never claim the caller's jobs."""
    return f"sqla_queue.conformance.{kind}.{uuid.uuid4().hex[:10]}"


def database_now(queue: Queue) -> datetime:
    """The database's clock, which decides ``run_at`` (worker clocks never do)."""
    with queue.core.executor.connection() as conn:
        return conn.execute(queue.core.statements.now).scalar_one()


def delete_queue_jobs(queue: Queue, queue_name: str) -> None:
    """Remove what a check enqueued (its queue of its own)."""
    with queue.core.executor.transaction() as conn:
        conn.execute(queue.core.statements.delete_queue_jobs, {"queue": queue_name})


class EventRecorder:
    """Counts every lifecycle event a Queue emits, to prove a check drove each one."""

    plugin_name = "sqla_queue.testing.recorder"

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    @hookimpl
    def sqla_queue_job_enqueued(self) -> None:
        self.counts["sqla_queue_job_enqueued"] += 1

    @hookimpl
    def sqla_queue_job_claimed(self) -> None:
        self.counts["sqla_queue_job_claimed"] += 1

    @hookimpl
    def sqla_queue_job_completed(self) -> None:
        self.counts["sqla_queue_job_completed"] += 1

    @hookimpl
    def sqla_queue_job_retried(self) -> None:
        self.counts["sqla_queue_job_retried"] += 1

    @hookimpl
    def sqla_queue_job_failed(self) -> None:
        self.counts["sqla_queue_job_failed"] += 1

    @hookimpl
    def sqla_queue_job_snoozed(self) -> None:
        self.counts["sqla_queue_job_snoozed"] += 1

    @hookimpl
    def sqla_queue_job_cancelled(self) -> None:
        self.counts["sqla_queue_job_cancelled"] += 1

    @hookimpl
    def sqla_queue_job_recovered(self) -> None:
        self.counts["sqla_queue_job_recovered"] += 1

    @hookimpl
    def sqla_queue_lost_claim(self) -> None:
        self.counts["sqla_queue_lost_claim"] += 1

    @hookimpl
    def sqla_queue_empty_claim(self) -> None:
        self.counts["sqla_queue_empty_claim"] += 1

    @hookimpl
    def sqla_queue_batch_committed(self) -> None:
        self.counts["sqla_queue_batch_committed"] += 1


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def plugin_errors() -> Iterator[list[str]]:
    """Collect what ``sqla_queue.plugins`` logs at ERROR: a lifecycle hook that raised."""
    logger = logging.getLogger("sqla_queue.plugins")
    handler = _ListHandler()
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)
