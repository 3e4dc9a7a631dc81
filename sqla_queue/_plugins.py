"""Building a Queue's PluginManager, calling hooks safely, and saying what is loaded.

One manager per Queue, never a module global: two queues in one process (or two tests) never
see each other's plugins. Order of registration: built-in defaults (strategies `trylast`), the
per-task options of this Queue's ``@queue.task`` (strategies `tryfirst`), then entry points of
the ``sqla_queue`` group (observers on install, strategy plugins only when enabled by name:
`_entry_points`), then the plugin objects given in ``plugins=``, then ``check_pending()`` so a
misspelt hook name fails at construction. pluggy calls the last registered first, so explicit
plugins are asked before entry points, and both before the built-in defaults.
"""

from __future__ import annotations

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
from ._entry_points import (
    ENABLED_PLUGINS_ENV,
    ENTRY_POINT_GROUP,  # noqa: F401  (kept importable from here)
    EntryPointState,
    enable_hint,
    installed,
    load_entry_points,
    names_from_env,
    refuse_strategies_registered_by,
    strategy_hooks,
)
from .errors import ConfigurationError, PluginError
from .types import ClaimedJob

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
    status: str = "enabled"
    """``enabled`` (asked by this Queue), ``available`` (installed, not taken) or ``blocked``."""
    enabled_by: str | None = None
    """``builtin``, ``installed`` (an observer), ``plugins=`` or ``SQLA_QUEUE_PLUGINS``."""
    strategy: bool = False
    """It implements a hook that can change what happens to a job: opt-in by name."""
    note: str | None = None
    """Why an available plugin is not enabled, and how to enable it."""


class QueuePluginManager(pluggy.PluginManager):
    """pluggy's manager, plus where each plugin came from and which names were blocked."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.sources: dict[str, tuple[str, str | None]] = {}
        self.blocked_names: tuple[str, ...] = ()
        self.explicit_names: frozenset[str] = frozenset()
        self.entry_point_states: dict[str, EntryPointState] = {}

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
    """A fresh manager for one Queue; `tasks` is its TaskRegistry (for per-task options).

    Strings in `plugins` name entry points to enable (see `_entry_points`); other items are
    plugin objects or modules. ``SQLA_QUEUE_PLUGINS`` adds names unless `load_entrypoints` is
    off: such a Queue takes plugins from its code only.
    """
    if isinstance(plugins, (str, bytes)):
        raise ConfigurationError("plugins must be a list (of plugin objects, modules or entry-point names), not a single string")
    pm = QueuePluginManager()
    pm.blocked_names = _blocked_names(blocked)
    for name in pm.blocked_names:
        pm.set_blocked(name)
    for name, module in DEFAULT_PLUGINS:
        pm.register_from(BUILTIN, module, name)
    if tasks is not None:
        pm.register_from(BUILTIN, TaskOverrides(tasks), TASK_OVERRIDES_NAME)
    items = list(plugins)
    requested = _requested_names(items, load_entrypoints)
    autoload = load_entrypoints and not os.environ.get(DISABLE_AUTOLOAD_ENV)
    if autoload or requested:
        pm.entry_point_states = load_entry_points(pm, autoload=autoload, requested=requested, logger=logger)
    explicit = [item for item in items if not isinstance(item, str)]
    pm.explicit_names = frozenset(plugin_name(plugin) for plugin in explicit)
    for plugin in explicit:
        _register_explicit(pm, plugin)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise ConfigurationError(f"plugin {exc.plugin!r}: {exc}") from None
    _warn_unused_blocks(pm)
    return pm


def _requested_names(items: list[object], load_entrypoints: bool) -> dict[str, str]:
    """Entry-point names to enable, each with where it was asked for: ``plugins=`` first."""
    requested = {item: "plugins=" for item in items if isinstance(item, str)}
    from_env = names_from_env()
    if from_env and not load_entrypoints:
        logger.warning("%s=%s is ignored by a Queue built with load_entrypoints=False",
                       ENABLED_PLUGINS_ENV, ",".join(from_env))
    elif from_env:
        for name in from_env:
            requested.setdefault(name, ENABLED_PLUGINS_ENV)
    return requested


def _blocked_names(blocked: Iterable[str]) -> tuple[str, ...]:
    if isinstance(blocked, str):
        raise ConfigurationError("blocked_plugins must be a list of names, not a single string")
    from_env = os.environ.get(BLOCKED_PLUGINS_ENV, "")
    names = [*blocked, *(part.strip() for part in from_env.split(","))]
    return tuple(dict.fromkeys(name for name in names if name))


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
    known |= {entry_point.name for _, entry_point in installed()}
    for name in pm.blocked_names:
        if name not in known:
            logger.warning(
                "blocked plugin %r matches no built-in or installed plugin (known: %s)",
                name, ", ".join(sorted(known)),
            )


def describe_plugins(pm: QueuePluginManager) -> list[PluginInfo]:
    """Every registered plugin, newest registration first (the order pluggy asks them, tryfirst
    and trylast aside), then the installed entry points this Queue did not take, then the
    names that were blocked."""
    infos = [_registered_info(pm, name, plugin)
             for name, plugin in reversed(pm.list_name_plugin()) if plugin is not None]
    for label, entry_point in installed():
        if not pm.has_plugin(entry_point.name) and not pm.is_blocked(entry_point.name):
            infos.append(_available_info(pm.entry_point_states.get(entry_point.name), entry_point.name, label))
    for name in pm.blocked_names:
        infos.append(PluginInfo(name, _blocked_source(pm, name), None, (), blocked=True, status="blocked"))
    return infos


def _registered_info(pm: QueuePluginManager, name: str, plugin: object) -> PluginInfo:
    source, dist = pm.sources.get(name, (EXPLICIT, None))
    hooks = tuple(sorted(caller.name for caller in pm.get_hookcallers(plugin) or []))
    state = pm.entry_point_states.get(name)
    enabled_by = {BUILTIN: "builtin", EXPLICIT: "plugins="}.get(source) or (state and state.enabled_by)
    return PluginInfo(name, source, dist, hooks, enabled_by=enabled_by, strategy=bool(strategy_hooks(hooks)))


def _available_info(state: EntryPointState | None, name: str, label: str) -> PluginInfo:
    if state is None or not state.loaded:
        note = (f"not loaded: this Queue loads no plugin on install (load_entrypoints=False or "
                f"{DISABLE_AUTOLOAD_ENV}); {enable_hint(name)}")
        return PluginInfo(name, ENTRY_POINT, label, (), status="available", note=note)
    strategies = strategy_hooks(state.hooks)
    note = f"implements {', '.join(strategies)}: {enable_hint(name)}"
    return PluginInfo(name, ENTRY_POINT, label, state.hooks, status="available", strategy=True, note=note)


def _blocked_source(pm: QueuePluginManager, name: str) -> str:
    if name in {n for n, _ in DEFAULT_PLUGINS} | {TASK_OVERRIDES_NAME}:
        return BUILTIN
    if any(entry_point.name == name for _, entry_point in installed()):
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
        before = set(pm.get_plugins())
        try:
            impl.function(**{arg: {"queue": queue}[arg] for arg in impl.argnames})
        except Exception as exc:
            raise PluginError(
                f"plugin {impl.plugin_name!r} raised in sqla_queue_configure: {exc!r}"
            ) from exc
        refuse_strategies_registered_by(pm, impl, before)


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
