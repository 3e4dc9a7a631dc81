"""Plumbing shared by the conformance checks: a throwaway Queue, direct calls to one plugin's
hook implementations, the database clock, and cleanup of the jobs a check wrote."""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, delete, func, select

from .._entry_points import implemented_hooks, strategy_hooks
from .._plugins import build_plugin_manager, plugin_name
from ..errors import ConfigurationError
from ..hookspecs import LIFECYCLE_HOOKS, hookimpl
from ..queue import Queue



class ConformanceError(AssertionError):
    """A plugin broke its hook contract. The message names the plugin, the hook and the input.

    An `AssertionError`, so pytest reports it as a test failure with the message in full.
    """


def hook_impls(plugin: object, hook_name: str) -> list[Any]:
    """The plugin's own implementations of `hook_name`, validated by a fresh plugin manager
    (a misspelt argument or hook name fails here, as it would in a Queue)."""
    try:
        pm = build_plugin_manager([plugin], load_entrypoints=False, blocked=_all_builtins())
    except ConfigurationError as exc:
        raise ConformanceError(f"plugin {plugin_name(plugin)!r} cannot be registered: {exc}") from None
    return [impl for impl in getattr(pm.hook, hook_name).get_hookimpls() if impl.plugin is plugin]


def loads_on_install(plugin: object) -> bool:
    """Whether an installed entry point holding `plugin` is registered by every Queue (it only
    observes) or only where it is enabled by name (it implements a strategy hook)."""
    pm = build_plugin_manager([], load_entrypoints=False)
    return not strategy_hooks(implemented_hooks(pm, plugin))


def _all_builtins() -> list[str]:
    from ..builtins import DEFAULT_PLUGINS

    return [name for name, _ in DEFAULT_PLUGINS]


def call_impl(impl: Any, **kwargs: Any) -> Any:
    """Call one implementation with the arguments it asked for, as pluggy would."""
    return impl.function(**{name: kwargs[name] for name in impl.argnames})


def require_impl(plugin: object, hook_name: str) -> Any:
    impls = hook_impls(plugin, hook_name)
    if not impls:
        raise ConformanceError(f"plugin {plugin_name(plugin)!r} does not implement {hook_name}")
    return impls[0]


def conformance_queue(target: Engine | str | Queue, plugins: Iterable[object]) -> Queue:
    """A Queue on the target's database with only the given plugins (and the built-ins)."""
    if isinstance(target, Queue):
        return Queue(target.engine, model=target.model, plugins=plugins, load_entrypoints=False)
    return Queue(target, plugins=plugins, load_entrypoints=False)


def unique_queue_name(kind: str) -> str:
    """Checks work on a queue of their own, so they never claim the caller's jobs."""
    return f"sqla_queue.conformance.{kind}.{uuid.uuid4().hex[:10]}"


def database_now(queue: Queue) -> datetime:
    """The database's clock, which decides ``run_at`` (worker clocks never do)."""
    with queue.engine.connect() as conn:
        return conn.execute(select(func.clock_timestamp())).scalar_one()


def delete_queue_jobs(queue: Queue, queue_name: str) -> None:
    """Remove what a check enqueued. Built here rather than in ``sqla_queue.sql`` because only
    test tooling ever deletes jobs by queue."""
    with queue.engine.begin() as conn:
        conn.execute(delete(queue.table).where(queue.table.c.queue_name == queue_name))


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
    def sqla_queue_job_recovered(self) -> None:
        self.counts["sqla_queue_job_recovered"] += 1

    @hookimpl
    def sqla_queue_lost_claim(self) -> None:
        self.counts["sqla_queue_lost_claim"] += 1

    @hookimpl
    def sqla_queue_empty_claim(self) -> None:
        self.counts["sqla_queue_empty_claim"] += 1


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
