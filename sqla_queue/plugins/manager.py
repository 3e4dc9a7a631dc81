"""Building a Queue's PluginManager and saying what is loaded (the hooks are called in
`sqla_queue.plugins.calls`).

One manager per Queue, never a module global: two queues in one process (or two tests) never
see each other's plugins. Order of registration: built-in defaults (strategies `trylast`), then
entry points of the ``sqla_queue`` group (observers on install, strategy plugins only when
enabled by name: `_entry_points`), then the plugin objects given in ``plugins=``, then
``check_pending()`` so a misspelt hook name fails at construction. pluggy calls the last
registered first, so explicit plugins are asked before entry points, and both before the
built-in defaults. The per-task options of ``@queue.task`` are no plugin: they are asked before
any hook is called (the manager keeps the Queue's task registry for that).

Hook wrappers are refused at registration: a wrapper could change another plugin's answer or
swallow its exception, and then no answer could be blamed on anyone (`sqla_queue.plugins.calls`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pluggy

from .. import hookspecs
from ..errors import ConfigurationError
from .builtins import DEFAULT_PLUGINS
from .entry_points import (
    BLOCKED_PLUGINS_ENV,
    ENABLED_PLUGINS_ENV,
    ENTRY_POINT_GROUP,  # noqa: F401  (kept importable from here)
    EntryPointState,
    enable_hint,
    hook_options,
    installed,
    load_entry_points,
    names_from_env,
    strategy_hooks,
)

DISABLE_AUTOLOAD_ENV = "SQLA_QUEUE_DISABLE_PLUGIN_AUTOLOAD"
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
    """pluggy's manager, plus where each plugin came from, which names were blocked, and the
    Queue's task registry (its per-task options are asked before any plugin)."""

    def __init__(self, tasks: Any = None) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.tasks = tasks
        self.sources: dict[str, tuple[str, str | None]] = {}
        self.blocked_names: tuple[str, ...] = ()
        self.explicit_names: frozenset[str] = frozenset()
        self.entry_point_states: dict[str, EntryPointState] = {}
        self.key_parity_checked: set[str] = set()
        """Tasks whose first job this process ran was checked by `calls.check_key_parity`."""

    def register(self, plugin: object, name: str | None = None) -> str | None:
        """pluggy's ``register``, refusing hook wrappers (every registration goes through here,
        a plugin registering another from ``sqla_queue_configure`` included)."""
        plugin_label = name or self.get_canonical_name(plugin)
        if not self.is_blocked(plugin_label):
            _refuse_wrappers(self, plugin, plugin_label)
        return super().register(plugin, name)

    def register_from(self, source: str, plugin: object, name: str, dist: str | None = None) -> None:
        try:
            registered = self.register(plugin, name=name)
        except ConfigurationError:
            raise
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
    pm = QueuePluginManager(tasks)
    pm.blocked_names = _blocked_names(blocked)
    for name in pm.blocked_names:
        pm.set_blocked(name)
    for name, module in DEFAULT_PLUGINS:
        pm.register_from(BUILTIN, module, name)
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


def _refuse_wrappers(pm: pluggy.PluginManager, plugin: object, name: str) -> None:
    wrapped = sorted(hook for hook, options in hook_options(pm, plugin).items()
                     if options.get("hookwrapper") or options.get("wrapper"))
    if wrapped:
        raise ConfigurationError(
            f"plugin {name!r} implements {', '.join(wrapped)} as a hook wrapper "
            "(hookwrapper=True or wrapper=True); sqla_queue refuses hook wrappers: implement the "
            "hook plainly (docs/reference/hooks.md, 'Hook wrappers')"
        )


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
    known = {name for name, _ in DEFAULT_PLUGINS} | pm.explicit_names
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
    if name in {n for n, _ in DEFAULT_PLUGINS}:
        return BUILTIN
    if any(entry_point.name == name for _, entry_point in installed()):
        return ENTRY_POINT
    return EXPLICIT if name in pm.explicit_names else UNKNOWN
