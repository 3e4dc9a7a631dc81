"""Building a Queue's PluginManager and calling hooks safely.

One manager per Queue, never a module global: two queues in one process (or two tests) never
see each other's plugins. Order of registration: built-in defaults (strategies `trylast`), then
entry points of the ``sqla_queue`` group, then the ``plugins=`` given in code, then
``check_pending()`` so a misspelt hook name fails at construction.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

import pluggy

from . import hookspecs
from .builtins import DEFAULT_PLUGINS
from .errors import ConfigurationError, PluginError

ENTRY_POINT_GROUP = "sqla_queue"
DISABLE_AUTOLOAD_ENV = "SQLA_QUEUE_DISABLE_PLUGIN_AUTOLOAD"

logger = logging.getLogger("sqla_queue.plugins")


def build_plugin_manager(
    plugins: Iterable[object] = (),
    *,
    load_entrypoints: bool = True,
    blocked: Iterable[str] = (),
) -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    for name in blocked:
        pm.set_blocked(name)
    for name, module in DEFAULT_PLUGINS:
        if not pm.is_blocked(name):
            pm.register(module, name=name)
    if load_entrypoints and not os.environ.get(DISABLE_AUTOLOAD_ENV):
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    for plugin in plugins:
        try:
            pm.register(plugin)
        except ValueError as exc:
            raise ConfigurationError(f"cannot register plugin {plugin!r}: {exc}") from exc
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise ConfigurationError(str(exc)) from exc
    return pm


def emit(pm: pluggy.PluginManager, hook_name: str, **kwargs: Any) -> None:
    """Call every implementation of a lifecycle hook; one that raises is logged and skipped."""
    for impl in _plain_impls(pm, hook_name):
        try:
            impl.function(**{arg: kwargs[arg] for arg in impl.argnames})
        except Exception:
            logger.exception("plugin %r raised in %s; ignored", impl.plugin_name, hook_name)


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
    for impl in _plain_impls(pm, hook_name):
        try:
            result = impl.function(**{arg: kwargs[arg] for arg in impl.argnames})
        except Exception as exc:
            raise PluginError(f"plugin {impl.plugin_name!r} raised in {hook_name}: {exc!r}") from exc
        if result is None:
            continue
        if not check(result):
            raise PluginError(
                f"plugin {impl.plugin_name!r} returned {result!r} from {hook_name}; expected {expected}"
            )
        return result
    return None


def _plain_impls(pm: pluggy.PluginManager, hook_name: str) -> list[Any]:
    """Implementations in pluggy's call order (last registered first, tryfirst/trylast honoured).

    Wrappers are left out: lifecycle and strategy hooks are plain calls.
    """
    impls = getattr(pm.hook, hook_name).get_hookimpls()
    return [impl for impl in reversed(impls) if not (impl.hookwrapper or impl.wrapper)]
