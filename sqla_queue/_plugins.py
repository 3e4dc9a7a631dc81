"""Building a Queue's PluginManager, calling hooks safely, and saying what is loaded.

One manager per Queue, never a module global: two queues in one process (or two tests) never
see each other's plugins. Order of registration: built-in defaults (strategies `trylast`), the
per-task options of this Queue's ``@queue.task`` (strategies `tryfirst`), then entry points of
the ``sqla_queue`` group, then the ``plugins=`` given in code, then ``check_pending()`` so a
misspelt hook name fails at construction. pluggy calls the last registered first, so explicit
plugins are asked before entry points, and both before the built-in defaults.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

import pluggy

from . import hookspecs
from .builtins import DEFAULT_PLUGINS
from .builtins import backoff as builtin_backoff
from .builtins import idempotency as builtin_idempotency
from .builtins import retryable as builtin_retryable
from .builtins.task_overrides import TASK_OVERRIDES_NAME, TaskOverrides
from .errors import ConfigurationError, PluginError
from .types import ClaimedJob

ENTRY_POINT_GROUP = hookspecs.PROJECT_NAME
DISABLE_AUTOLOAD_ENV = "SQLA_QUEUE_DISABLE_PLUGIN_AUTOLOAD"
BLOCKED_PLUGINS_ENV = "SQLA_QUEUE_BLOCKED_PLUGINS"
"""Comma-separated plugin names never to register, added to ``Queue(blocked_plugins=)``: lets an
operator switch off an installed plugin without touching the application's code."""

BUILTIN = "builtin"
ENTRY_POINT = "entry point"
EXPLICIT = "explicit"
UNKNOWN = "unknown"

logger = logging.getLogger("sqla_queue.plugins")


@dataclass(frozen=True)
class PluginInfo:
    """One line of ``sqla-queue plugins``: what a name stands for and where it came from."""

    name: str
    source: str
    """``builtin``, ``entry point`` or ``explicit`` (given in ``plugins=``); a blocked name
    that matches none of these is ``unknown``."""
    distribution: str | None
    """``name version`` of the distribution that declared the entry point, else None."""
    hooks: tuple[str, ...]
    blocked: bool = False


class QueuePluginManager(pluggy.PluginManager):
    """pluggy's manager, plus where each plugin came from and which names were blocked."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.sources: dict[str, tuple[str, str | None]] = {}
        self.blocked_names: tuple[str, ...] = ()
        self.explicit_names: frozenset[str] = frozenset()

    def register_from(self, source: str, plugin: object, name: str, dist: str | None = None) -> None:
        try:
            registered = self.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:
            raise ConfigurationError(f"invalid {source} plugin: {exc}") from None
        except ValueError as exc:
            raise ConfigurationError(f"cannot register plugin {name!r} ({source}): {exc}") from None
        if registered is not None:
            self.sources[name] = (source, dist)


def build_plugin_manager(
    plugins: Iterable[object] = (),
    *,
    load_entrypoints: bool = True,
    blocked: Iterable[str] = (),
    tasks: Any = None,
) -> QueuePluginManager:
    """A fresh manager for one Queue; `tasks` is its TaskRegistry (for per-task options)."""
    pm = QueuePluginManager()
    pm.blocked_names = _blocked_names(blocked)
    for name in pm.blocked_names:
        pm.set_blocked(name)
    for name, module in DEFAULT_PLUGINS:
        pm.register_from(BUILTIN, module, name)
    if tasks is not None:
        pm.register_from(BUILTIN, TaskOverrides(tasks), TASK_OVERRIDES_NAME)
    if load_entrypoints and not os.environ.get(DISABLE_AUTOLOAD_ENV):
        _load_entry_points(pm)
    explicit = list(plugins)
    pm.explicit_names = frozenset(plugin_name(plugin) for plugin in explicit)
    for plugin in explicit:
        _register_explicit(pm, plugin)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise ConfigurationError(f"plugin {exc.plugin!r}: {exc}") from None
    _warn_unused_blocks(pm)
    return pm


def _blocked_names(blocked: Iterable[str]) -> tuple[str, ...]:
    if isinstance(blocked, str):
        raise ConfigurationError("blocked_plugins must be a list of names, not a single string")
    from_env = os.environ.get(BLOCKED_PLUGINS_ENV, "")
    names = [*blocked, *(part.strip() for part in from_env.split(","))]
    return tuple(dict.fromkeys(name for name in names if name))


def _load_entry_points(pm: QueuePluginManager) -> None:
    """Like pluggy's ``load_setuptools_entrypoints``, but a broken plugin names itself.

    A distribution installed twice (an editable install beside a regular one) shows up twice;
    the first registration of a name wins.
    """
    for dist, entry_point in _entry_points():
        if pm.has_plugin(entry_point.name) or pm.is_blocked(entry_point.name):
            continue
        label = f"{dist.metadata['Name']} {dist.version}"
        try:
            plugin = entry_point.load()
        except Exception as exc:
            raise ConfigurationError(
                f"entry point {entry_point.name!r} of {label} ({entry_point.value}) failed to "
                f"load: {exc!r}; block it with blocked_plugins=[{entry_point.name!r}] or "
                f"{BLOCKED_PLUGINS_ENV}={entry_point.name}"
            ) from exc
        pm.register_from(ENTRY_POINT, plugin, entry_point.name, label)


def _entry_points() -> Iterator[tuple[importlib.metadata.Distribution, importlib.metadata.EntryPoint]]:
    for dist in importlib.metadata.distributions():
        for entry_point in dist.entry_points:
            if entry_point.group == ENTRY_POINT_GROUP:
                yield dist, entry_point


def _register_explicit(pm: QueuePluginManager, plugin: object) -> None:
    """Register a ``plugins=`` item; one already loaded (say, from its entry point) is kept once."""
    if pm.is_registered(plugin):
        logger.debug("plugin %r is already registered as %r", plugin, pm.get_name(plugin))
        return
    name = base = plugin_name(plugin)
    number = 1
    while pm.has_plugin(name):  # two instances of one class: "pkg.Class", then "pkg.Class#2"
        number += 1
        name = f"{base}#{number}"
    pm.register_from(EXPLICIT, plugin, name)


def plugin_name(plugin: object) -> str:
    """A readable, stable name for an explicit plugin: the module's, class's or function's
    dotted name, else ``module.ClassName`` of an instance (pluggy's default is its id()).

    An instance may choose its own with a ``plugin_name`` attribute.
    """
    own = getattr(plugin, "plugin_name", None)
    if isinstance(own, str) and own:
        return own
    qualified = getattr(plugin, "__qualname__", None)
    if isinstance(qualified, str):
        return f"{plugin.__module__}.{qualified}"  # type: ignore[attr-defined]
    module_name = getattr(plugin, "__name__", None)
    if isinstance(module_name, str):
        return module_name
    cls = type(plugin)
    return f"{cls.__module__}.{cls.__qualname__}"


def _warn_unused_blocks(pm: QueuePluginManager) -> None:
    """A blocked name that matched nothing is usually a typo; the plugin it meant still runs."""
    if not pm.blocked_names:
        return
    known = {name for name, _ in DEFAULT_PLUGINS} | {TASK_OVERRIDES_NAME} | pm.explicit_names
    known |= {entry_point.name for _, entry_point in _entry_points()}
    for name in pm.blocked_names:
        if name not in known:
            logger.warning(
                "blocked plugin %r matches no built-in or installed plugin (known: %s)",
                name, ", ".join(sorted(known)),
            )


def describe_plugins(pm: QueuePluginManager) -> list[PluginInfo]:
    """Every registered plugin, newest registration first (the order pluggy asks them, tryfirst
    and trylast aside), then the names that were blocked."""
    infos = []
    for name, plugin in reversed(pm.list_name_plugin()):
        if plugin is None:
            continue
        source, dist = pm.sources.get(name, (EXPLICIT, None))
        callers = pm.get_hookcallers(plugin) or []
        infos.append(PluginInfo(name, source, dist, tuple(sorted(c.name for c in callers))))
    for name in pm.blocked_names:
        infos.append(PluginInfo(name, _blocked_source(pm, name), None, (), blocked=True))
    return infos


def _blocked_source(pm: QueuePluginManager, name: str) -> str:
    if name in {n for n, _ in DEFAULT_PLUGINS} | {TASK_OVERRIDES_NAME}:
        return BUILTIN
    if any(entry_point.name == name for _, entry_point in _entry_points()):
        return ENTRY_POINT
    return EXPLICIT if name in pm.explicit_names else UNKNOWN


# -- calling hooks ------------------------------------------------------------------------


def emit(pm: pluggy.PluginManager, hook_name: str, **kwargs: Any) -> None:
    """Call every implementation of a lifecycle hook; one that raises is logged and skipped.

    Calling the implementations one by one (not pluggy's hook call, which stops at the first
    exception) means a broken metrics plugin cannot starve the ones after it, and the job's
    outcome, already committed, is never affected.
    """
    _call_each(_plain_impls(pm, hook_name), hook_name, kwargs)


def emit_each(pm: pluggy.PluginManager, hook_name: str, events: Iterable[Any]) -> None:
    """`emit` for a batch of ``event=`` payloads (a claim's jobs, a round's completions).

    The implementations are looked up once per batch, and `events` (a generator) is not even
    built when nothing implements the hook: per-job work stays off the worker's hot path.
    """
    impls = _plain_impls(pm, hook_name)
    if impls:
        for event in events:
            _call_each(impls, hook_name, {"event": event})


def _call_each(impls: list[Any], hook_name: str, kwargs: dict[str, Any]) -> None:
    for impl in impls:
        try:
            impl.function(**{arg: kwargs[arg] for arg in impl.argnames})
        except Exception:
            logger.exception("plugin %r raised in %s; ignored", impl.plugin_name, hook_name)


def configure(pm: pluggy.PluginManager, queue: Any) -> None:
    """Run `sqla_queue_configure` for a new Queue; a plugin that raises stops construction."""
    for impl in _plain_impls(pm, "sqla_queue_configure"):
        try:
            impl.function(**{arg: {"queue": queue}[arg] for arg in impl.argnames})
        except Exception as exc:
            raise PluginError(
                f"plugin {impl.plugin_name!r} raised in sqla_queue_configure: {exc!r}"
            ) from exc


def failure_decision(
    pm: pluggy.PluginManager, job: ClaimedJob, error: BaseException
) -> timedelta | Literal[False]:
    """For a job whose handler raised: the delay before its next attempt, or False to fail it.

    A strategy plugin that raises or answers outside its contract is logged as a `PluginError`
    naming it, and the built-in defaults decide this one failure instead: raising into the
    worker would leave the job running until its lease expired, and kill the handler thread.
    """
    try:
        return _decide_failure(pm, job, error)
    except PluginError as exc:
        logger.error("%s; the built-in defaults decide for job %s instead", exc, job.id)
        return _decide_failure_by_defaults(job, error)


def _decide_failure(
    pm: pluggy.PluginManager, job: ClaimedJob, error: BaseException
) -> timedelta | Literal[False]:
    retryable = first_result(
        pm, "sqla_queue_is_retryable", lambda answer: isinstance(answer, bool),
        "True, False or None", job=job, error=error,
    )
    if retryable is False or job.is_last_attempt:
        return False
    delay = first_result(
        pm, "sqla_queue_retry_delay", is_delay_or_false,
        "a non-negative timedelta, False or None", job=job, error=error, attempt=job.attempts,
    )
    return timedelta(0) if delay is None else delay


def _decide_failure_by_defaults(job: ClaimedJob, error: BaseException) -> timedelta | Literal[False]:
    if not builtin_retryable.sqla_queue_is_retryable(error=error) or job.is_last_attempt:
        return False
    return builtin_backoff.sqla_queue_retry_delay(job=job, attempt=job.attempts)


def is_delay_or_false(value: Any) -> bool:
    """The retry-delay contract: ``False``, or a non-negative timedelta (not a bare number:
    seconds or milliseconds would be a guess)."""
    return value is False or (isinstance(value, timedelta) and value >= timedelta(0))


def first_result(
    pm: pluggy.PluginManager,
    hook_name: str,
    check: Callable[[Any], bool],
    expected: str,
    **kwargs: Any,
) -> Any:
    """Ask a strategy hook's implementations in call order; the first non-None answer wins.

    Walking the implementations ourselves (instead of pluggy's firstresult call) lets an
    invalid answer be reported with the name of the plugin that gave it.
    """
    return first_result_of(_plain_impls(pm, hook_name), hook_name, check, expected, **kwargs)


def key_askers(pm: pluggy.PluginManager, tasks: Any) -> tuple[list[Any], Any]:
    """For a batch of enqueues: the `sqla_queue_idempotency_key` implementations that may
    answer, in call order, and which of them (if any) is `tasks`' per-task option.

    The built-in default (``sqla_queue.idempotency``) always answers None and is left out. The
    per-task one answers None for a task without ``idempotency_key=``, so the caller may skip it
    for those; with nothing else left, no hook is called per job at all.
    """
    impls = [
        impl for impl in _plain_impls(pm, "sqla_queue_idempotency_key")
        if impl.plugin is not builtin_idempotency
    ]
    per_task = next(
        (impl for impl in impls
         if isinstance(impl.plugin, TaskOverrides) and impl.plugin.serves(tasks)),
        None,
    )
    return impls, per_task


def first_result_of(
    impls: list[Any], hook_name: str, check: Callable[[Any], bool], expected: str, **kwargs: Any
) -> Any:
    """`first_result` over implementations looked up once (see `key_askers`)."""
    for impl in impls:
        try:
            result = impl.function(**{arg: kwargs[arg] for arg in impl.argnames})
        except PluginError:
            raise
        except Exception as exc:
            raise PluginError(f"plugin {impl.plugin_name!r} raised in {hook_name}: {exc!r}") from exc
        if result is None:
            continue
        if not check(result):
            raise PluginError(
                f"plugin {impl.plugin_name!r} returned {_short_repr(result)} from {hook_name}; "
                f"expected {expected}"
            )
        return result
    return None


def _short_repr(value: Any) -> str:
    """The bad answer, bounded: a plugin may return something huge (or payload-bearing)."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}... ({type(value).__name__})"


def _plain_impls(pm: pluggy.PluginManager, hook_name: str) -> list[Any]:
    """Implementations in pluggy's call order (last registered first, tryfirst/trylast honoured).

    Wrappers are left out: lifecycle and strategy hooks are plain calls.
    """
    impls = getattr(pm.hook, hook_name).get_hookimpls()
    return [impl for impl in reversed(impls) if not (impl.hookwrapper or impl.wrapper)]
