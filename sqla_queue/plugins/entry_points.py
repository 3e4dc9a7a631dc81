"""Which installed plugins a Queue takes: observers on install, strategies only by name.

Installing a distribution must never change what a Queue stores, deduplicates, retries or
fails. So an entry point of the ``sqla_queue`` group is classified by the hooks its plugin
object implements (as pluggy parses them, not by a list of plugin names):

* an **observer** implements only the hooks in `OBSERVER_HOOKS`; it is registered when the
  Queue loads entry points (the default), like a metrics exporter or an error reporter;
* any other hook (the strategies, and every hook added later unless it is listed here) makes
  it a **strategy plugin**: it takes part only when enabled by its entry-point name, through
  ``Queue(plugins=["name"])``, ``SQLA_QUEUE_PLUGINS=name,other`` or ``sqla-queue --plugin name``
  (which sets that variable for the command).
"""

from __future__ import annotations

import difflib
import importlib.metadata
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pluggy

from .. import hookspecs
from ..errors import ConfigurationError

ENTRY_POINT_GROUP = hookspecs.PROJECT_NAME
ENABLED_PLUGINS_ENV = "SQLA_QUEUE_PLUGINS"
BLOCKED_PLUGINS_ENV = "SQLA_QUEUE_BLOCKED_PLUGINS"
"""Comma-separated entry-point names to enable, added to the strings in ``Queue(plugins=)``."""

LIFECYCLE_HOOKS = frozenset(hookspecs.LIFECYCLE_HOOKS)

OBSERVER_HOOKS = frozenset(hookspecs.OBSERVER_HOOKS)
"""Hooks that cannot change what happens to a job, so a plugin made only of them may load on
install (see `hookspecs.OBSERVER_HOOKS`). What ``sqla_queue_configure`` could do through the
protocol beyond keeping the Queue, register more plugins on ``queue.plugin_manager``, is
checked after it runs (`refuse_strategies_registered_by`). Anything else a plugin's code does
to a Queue object is arbitrary code, which importing an installed module could run anyway.
"""


def enable_hint(name: str = "NAME") -> str:
    """The three ways to enable a strategy plugin, for listings and error messages."""
    quoted = "[...]" if name == "NAME" else f"[{name!r}]"
    return f"enable with --plugin {name} / {ENABLED_PLUGINS_ENV}={name} / plugins={quoted}"


@dataclass
class EntryPointState:
    """One installed entry point as this Queue saw it."""

    name: str
    distribution: str
    hooks: tuple[str, ...] = ()
    enabled_by: str | None = None
    """``installed`` (an observer), ``plugins=`` or ``SQLA_QUEUE_PLUGINS``; None: not taken."""
    loaded: bool = False


def implemented_hooks(pm: pluggy.PluginManager, plugin: object) -> tuple[str, ...]:
    """The ``sqla_queue_*`` hooks `plugin` implements, found the way pluggy's ``register`` does."""
    return tuple(sorted(hook_options(pm, plugin)))


def hook_options(pm: pluggy.PluginManager, plugin: object) -> dict[str, Any]:
    """``{hook name: hookimpl options}`` of `plugin`, as pluggy's ``register`` parses them."""
    found = {}
    for attribute in dir(plugin):
        options = pm.parse_hookimpl_opts(plugin, attribute)
        if options is not None:
            found[options.get("specname") or attribute] = options
    return found


def _misspelt_hooks(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    """Implementations of no hook (and not marked ``optionalhook``): left unregistered as
    "available", a typo would never be reported; ``check_pending`` would have."""
    return [
        hook for hook, options in hook_options(pm, plugin).items()
        if not options.get("optionalhook") and not _has_spec(pm, hook)
    ]


def _has_spec(pm: pluggy.PluginManager, hook: str) -> bool:
    caller = getattr(pm.hook, hook, None)
    return caller is not None and caller.has_spec()


def strategy_hooks(hooks: Iterable[str]) -> tuple[str, ...]:
    """The hooks that make a plugin opt-in: every one that is not an observer hook."""
    return tuple(hook for hook in hooks if hook not in OBSERVER_HOOKS)


def installed() -> Iterator[tuple[str, importlib.metadata.EntryPoint]]:
    """``(distribution label, entry point)`` of the group; a name installed twice (an editable
    install beside a regular one) is given once, the first found."""
    seen = set()
    for dist in importlib.metadata.distributions():
        for entry_point in dist.entry_points:
            if entry_point.group == ENTRY_POINT_GROUP and entry_point.name not in seen:
                seen.add(entry_point.name)
                yield f"{dist.metadata['Name']} {dist.version}", entry_point


def installed_names() -> list[str]:
    return sorted(name for name in (ep.name for _, ep in installed()))


def names_from_env() -> tuple[str, ...]:
    return split_names(os.environ.get(ENABLED_PLUGINS_ENV, ""))


def split_names(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))


def unknown_names_error(where: str, unknown: Iterable[str], available: Iterable[str]) -> ConfigurationError:
    """`where` is ``plugins=``, ``SQLA_QUEUE_PLUGINS`` or ``--plugin``."""
    available = sorted(available)
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, available, n=1)
        parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return ConfigurationError(
        f"{where} names {', '.join(parts)}: no installed plugin has that name; the installed "
        f"entry points of the {ENTRY_POINT_GROUP!r} group are: {', '.join(available) or 'none'}"
    )


def load_entry_points(
    pm: Any, *, autoload: bool, requested: dict[str, str], logger: logging.Logger
) -> dict[str, EntryPointState]:
    """Register the observers (when `autoload`) and the `requested` names ({name: where}).

    A requested name that is not installed is a `ConfigurationError` listing the installed
    ones; a strategy plugin found on install is loaded (to learn its hooks) but not registered.
    """
    found = list(installed())
    unknown = [name for name in requested if name not in {ep.name for _, ep in found}]
    if unknown:
        where = " and ".join(sorted({requested[name] for name in unknown}))
        raise unknown_names_error(where, unknown, (ep.name for _, ep in found))
    states = {}
    for label, entry_point in found:
        state = states[entry_point.name] = EntryPointState(entry_point.name, label)
        if pm.is_blocked(entry_point.name):
            if entry_point.name in requested:
                logger.warning("plugin %r is enabled by %s but blocked; blocking wins",
                               entry_point.name, requested[entry_point.name])
            continue
        if entry_point.name in requested or autoload:
            _take(pm, state, entry_point, requested.get(entry_point.name))
    return states


def _take(pm: Any, state: EntryPointState, entry_point: importlib.metadata.EntryPoint, enabled_by: str | None) -> None:
    plugin = _load(entry_point, state.distribution)
    misspelt = _misspelt_hooks(pm, plugin)
    if misspelt:
        raise ConfigurationError(
            f"entry point {entry_point.name!r} of {state.distribution} implements "
            f"{', '.join(misspelt)}, which is no sqla_queue hook (see docs/reference/hooks.md)"
        )
    state.loaded = True
    state.hooks = implemented_hooks(pm, plugin)
    if enabled_by is None and strategy_hooks(state.hooks):
        return  # installed, not enabled: listed as available, never asked
    state.enabled_by = enabled_by or "installed"
    pm.register_from("entry point", plugin, entry_point.name, state.distribution)


def _load(entry_point: importlib.metadata.EntryPoint, label: str) -> object:
    try:
        return entry_point.load()
    except Exception as exc:
        raise ConfigurationError(
            f"entry point {entry_point.name!r} of {label} ({entry_point.value}) failed to "
            f"load: {exc!r}; block it with blocked_plugins=[{entry_point.name!r}] or "
            f"{BLOCKED_PLUGINS_ENV}={entry_point.name}"
        ) from exc


def loaded_on_install(pm: Any, name: str) -> bool:
    """Whether the plugin registered as `name` is an observer this Queue took on install
    (enabled by no one)."""
    state = pm.entry_point_states.get(name)
    return state is not None and state.enabled_by == "installed"


def refuse_strategies_registered_by(pm: Any, observer: str, before: set[object]) -> None:
    """After an on-install observer's ``sqla_queue_configure``: a plugin it registered that
    implements a strategy hook is unregistered and refused (it was enabled by no one)."""
    for plugin in [p for p in pm.get_plugins() if p not in before]:
        strategies = strategy_hooks(implemented_hooks(pm, plugin))
        if strategies:
            name = pm.get_name(plugin)
            pm.unregister(plugin)
            raise ConfigurationError(
                f"plugin {observer!r}, loaded on install as an observer, registered "
                f"{name!r} implementing {', '.join(strategies)} from sqla_queue_configure; a "
                f"plugin that changes behaviour takes part only when enabled by name "
                f"({enable_hint(name).removeprefix('enable with ')})"
            )
