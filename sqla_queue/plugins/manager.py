"""Building a Queue's PluginManager, calling its hooks through pluggy, and saying what is loaded.

One manager per Queue, never a module global: two queues in one process (or two tests) never
see each other's plugins. Order of registration: built-in defaults (strategies `trylast`), then
entry points of the ``sqla_queue`` group (observers on install, strategy plugins only when
enabled by name: `_entry_points`), then the plugin objects given in ``plugins=``, then
``check_pending()`` so a misspelt hook name fails at construction. pluggy calls the last
registered first, so explicit plugins are asked before entry points, and both before the
built-in defaults. The per-task options of ``@queue.task`` are no plugin: they are asked before
any hook is called (the manager keeps the Queue's task registry for that).

Every hook is called through pluggy (``pm.hook.<name>(...)``). Around those calls, one layer
names the plugin that broke a contract: an exception is traced to the implementation whose
frame raised it, an answer outside a strategy's contract to the implementation that gives it
when asked alone. Hook wrappers are refused at registration: a wrapper could change another
plugin's answer or swallow its exception, and then no answer could be blamed on anyone.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

import pluggy

from .. import _validate, hookspecs
from .entry_points import (
    BLOCKED_PLUGINS_ENV,
    ENABLED_PLUGINS_ENV,
    ENTRY_POINT_GROUP,  # noqa: F401  (kept importable from here)
    EntryPointState,
    enable_hint,
    hook_options,
    installed,
    load_entry_points,
    loaded_on_install,
    names_from_env,
    refuse_strategies_registered_by,
    strategy_hooks,
)
from .._tasks import Task
from .builtins import DEFAULT_PLUGINS
from ..errors import ConfigurationError, InvalidInputError, PluginError
from ..types import ClaimedJob

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


# -- calling hooks ------------------------------------------------------------------------

NO_DELAY = timedelta(0)
"""What no retry-delay opinion means: retry at once."""

KeyAsker = Callable[[Task, Mapping[str, Any], str, int, Any, Any], "str | None"]
"""``ask(task, payload, queue, max_attempts, run_at, delay)``: the key for a job enqueued
without an explicit one, or None."""


def emit(pm: pluggy.PluginManager, hook_name: str, **kwargs: Any) -> None:
    """Call a lifecycle hook; a plugin that raises is logged by name and the others are still
    called. The job's outcome is already committed: nothing a plugin does here changes it."""
    hook = getattr(pm.hook, hook_name)
    if hook.get_hookimpls():
        try:
            hook(**kwargs)
        except Exception as exc:
            _isolate(pm, hook, kwargs, exc)


def emit_each(pm: pluggy.PluginManager, hook_name: str, events: Iterable[Any]) -> None:
    """`emit` for a batch of ``event=`` payloads (a claim's jobs, a round's completions).

    Whether anything implements the hook is looked up once per batch, and `events` (a
    generator) is not even built when nothing does: no per-job work on the worker's hot path.
    Otherwise each event is one pluggy call, with nothing of ours around it but a ``try``.
    """
    hook = getattr(pm.hook, hook_name)
    if hook.get_hookimpls():
        for event in events:
            try:
                hook(event=event)
            except Exception as exc:
                _isolate(pm, hook, {"event": event}, exc)


def _isolate(pm: pluggy.PluginManager, hook: Any, kwargs: dict[str, Any], exc: Exception) -> None:
    """After an event call raised: log the implementation that raised by its plugin's name,
    then call the ones pluggy did not reach (it stops at the first exception) through a subset
    caller without those already called, and so on: each plugin runs once per event."""
    caller, called = hook, set()
    while True:
        order = _call_order(caller)
        culprit = _raised_by(order, exc)
        if culprit is None:
            logger.error("calling %s failed outside any plugin; ignored", hook.name, exc_info=exc)
            return
        logger.error("plugin %r raised in %s; ignored", culprit.plugin_name, hook.name, exc_info=exc)
        done = order.index(culprit) + 1
        if done == len(order):
            return
        called.update(impl.plugin for impl in order[:done])
        caller = pm.subset_hook_caller(hook.name, called)
        try:
            caller(**kwargs)
            return
        except Exception as again:
            exc = again


def configure(pm: pluggy.PluginManager, queue: Any) -> None:
    """Run `sqla_queue_configure` for a new Queue; a plugin that raises stops construction.

    The observers taken on install are called after the others, each alone, so that a
    strategy plugin one of them registers is refused (`refuse_strategies_registered_by`).
    """
    hook_name = "sqla_queue_configure"
    impls = getattr(pm.hook, hook_name).get_hookimpls()
    everyone = [impl.plugin for impl in impls]
    observers = [impl for impl in impls if loaded_on_install(pm, impl.plugin_name)]
    _set_up(pm.subset_hook_caller(hook_name, [impl.plugin for impl in observers]), queue)
    for observer in observers:
        before = set(pm.get_plugins())
        _set_up(pm.subset_hook_caller(hook_name, [p for p in everyone if p is not observer.plugin]), queue)
        refuse_strategies_registered_by(pm, observer.plugin_name, before)


def _set_up(caller: Any, queue: Any) -> None:
    try:
        caller(queue=queue)
    except Exception as exc:
        culprit = _raised_by(_call_order(caller), exc)
        raise PluginError(f"{_who(culprit)} raised in sqla_queue_configure: {exc!r}") from exc


def failure_decision(
    pm: QueuePluginManager, job: ClaimedJob, error: BaseException
) -> timedelta | Literal[False]:
    """For a job whose handler raised: the delay before its next attempt, or False to fail it.

    No opinion from anyone means retryable, and retry at once. A plugin that raises or answers
    outside its contract is logged as a `PluginError` naming it and left out of this decision:
    the remaining registered plugins decide (a blocked built-in is not among them). Raising
    into the worker would leave the job running until its lease expired.
    """
    retryable = _decide(pm, "sqla_queue_is_retryable", job=job, error=error)
    if retryable is False or job.is_last_attempt:
        return False
    delay = _task_retry_delay(pm, job, error)
    if delay is None:
        delay = _decide(pm, "sqla_queue_retry_delay", job=job, error=error, attempt=job.attempts)
    return NO_DELAY if delay is None else delay


def _task_retry_delay(pm: QueuePluginManager, job: ClaimedJob, error: BaseException) -> Any:
    """The task's own ``retry_delay=``, asked before any plugin; a broken one defers to them."""
    task = pm.tasks.get(job.task) if pm.tasks is not None else None
    if task is None:
        return None
    try:
        return task.own_retry_delay(job.attempts, error)
    except PluginError as exc:
        logger.error("%s; the plugins decide for job %s instead", exc, job.id)
        return None


def _decide(pm: pluggy.PluginManager, hook_name: str, **kwargs: Any) -> Any:
    """A failure hook's answer; a plugin breaking the contract is logged and left out, and the
    hook is called again without it (at most once per implementation)."""
    left_out: list[object] = []
    job_id = kwargs["job"].id
    while True:
        try:
            return _ask(pm, hook_name, kwargs, left_out)
        except _ContractBroken as broken:
            if broken.plugin is None:
                logger.error("%s; no plugin decides for job %s", broken, job_id)
                return None
            logger.error("%s; the other plugins decide for job %s instead", broken, job_id)
            left_out.append(broken.plugin)


def idempotency_key_asker(pm: QueuePluginManager) -> KeyAsker:
    """The key asker for one enqueue call: the task's own ``idempotency_key=`` first, then
    `sqla_queue_idempotency_key` through pluggy.

    Chosen once per call: when nothing implements the hook, the asker neither builds the
    options nor calls pluggy, so enqueue does no per-job plugin work. A broken answer is a
    `PluginError` naming the plugin (or the task), raised before anything is written.
    """
    if not pm.hook.sqla_queue_idempotency_key.get_hookimpls():
        return _task_key

    def ask(task: Task, payload: Mapping[str, Any], queue: str, max_attempts: int, run_at: Any, delay: Any) -> str | None:
        key = task.own_idempotency_key(payload)
        if key is not None:
            return key
        options = {"queue": queue, "max_attempts": max_attempts, "run_at": run_at, "delay": delay}
        try:
            return _ask(pm, "sqla_queue_idempotency_key",
                        {"task": task.name, "payload": payload, "options": options})
        except _ContractBroken as broken:
            raise PluginError(str(broken)) from broken.__cause__

    return ask


def _task_key(task: Task, payload: Mapping[str, Any], *options: Any) -> str | None:
    return None if task.idempotency_key is None else task.own_idempotency_key(payload)


class _ContractBroken(Exception):
    """A strategy implementation raised or answered outside its hook's contract; `plugin` is
    the plugin object, None when no implementation could be blamed."""

    def __init__(self, message: str, impl: Any) -> None:
        super().__init__(message)
        self.plugin = None if impl is None else impl.plugin


def is_delay_or_false(value: Any) -> bool:
    """The retry-delay contract: ``False``, or a non-negative timedelta (not a bare number:
    seconds or milliseconds would be a guess)."""
    return value is False or (isinstance(value, timedelta) and value >= timedelta(0))


def _is_usable_key(value: Any) -> bool:
    try:
        _validate.idempotency_key(value)
    except InvalidInputError:
        return False
    return True


_CONTRACTS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "sqla_queue_is_retryable": (lambda answer: isinstance(answer, bool), "True, False or None"),
    "sqla_queue_retry_delay": (is_delay_or_false, "a non-negative timedelta, False or None"),
    "sqla_queue_idempotency_key": (
        _is_usable_key, "a non-empty str of at most 512 printable characters, or None"),
}
"""What each strategy hook may answer besides None (no opinion), and how to say so."""


def _ask(pm: pluggy.PluginManager, hook_name: str, kwargs: dict[str, Any], left_out: Iterable[object] = ()) -> Any:
    """The strategy's answer: pluggy's firstresult call (without the `left_out` plugins),
    checked against the hook's contract; `_ContractBroken` names the plugin that broke it."""
    left_out = list(left_out)
    caller = pm.subset_hook_caller(hook_name, left_out) if left_out else getattr(pm.hook, hook_name)
    try:
        answer = caller(**kwargs)
    except Exception as exc:
        culprit = _raised_by(_call_order(caller), exc)
        raise _ContractBroken(f"{_who(culprit)} raised in {hook_name}: {exc!r}", culprit) from exc
    check, expected = _CONTRACTS[hook_name]
    if answer is None or check(answer):
        return answer
    culprit = _answered_by(pm, caller, kwargs, check)
    raise _ContractBroken(
        f"{_who(culprit)} returned {_short_repr(answer)} from {hook_name}; expected {expected}", culprit
    )


def _answered_by(pm: pluggy.PluginManager, caller: Any, kwargs: dict[str, Any], check: Callable[[Any], bool]) -> Any:
    """The implementation that gave an answer outside the contract.

    pluggy does not say which implementation gave a firstresult answer, so each is asked
    again alone, in call order, until one answers: strategy hooks are pure by contract, and
    this runs only when a plugin already broke it. None if the answer does not come back.
    """
    everyone = [impl.plugin for impl in getattr(pm.hook, caller.name).get_hookimpls()]
    for impl in _call_order(caller):
        alone = pm.subset_hook_caller(caller.name, [p for p in everyone if p is not impl.plugin])
        try:
            answer = alone(**kwargs)
        except Exception:
            return impl
        if answer is not None:
            return None if check(answer) else impl
    return None


def _call_order(caller: Any) -> list[Any]:
    """The implementations in the order pluggy calls them (last registered first, tryfirst and
    trylast honoured)."""
    return [impl for impl in reversed(caller.get_hookimpls()) if not (impl.hookwrapper or impl.wrapper)]


def _raised_by(order: list[Any], exc: BaseException) -> Any:
    """The implementation pluggy called that `exc` came out of: the outermost traceback frame
    running one of their functions (an implementation calling another's function is blamed
    itself). A decorated implementation is found by its wrapper's frame or, when several share
    that wrapper, by the decorated function's. None if no frame tells (pluggy itself raised)."""
    by_code: dict[Any, list[Any]] = {}
    for impl in order:
        for function in {_plain_function(impl.function), _plain_function(inspect.unwrap(impl.function))}:
            by_code.setdefault(getattr(function, "__code__", None), []).append(impl)
    tb = exc.__traceback__
    while tb is not None:
        candidates = by_code.get(tb.tb_frame.f_code)
        found = candidates and _bound_to(tb.tb_frame, candidates)
        if found:
            return found
        tb = tb.tb_next
    return None


def _plain_function(function: Any) -> Any:
    return getattr(function, "__func__", function)


def _bound_to(frame: Any, candidates: list[Any]) -> Any:
    """Among implementations sharing one function (two instances of a class), the one whose
    instance the frame runs on; None if the frame does not tell."""
    if len(candidates) == 1:
        return candidates[0]
    code = frame.f_code
    instance = frame.f_locals.get(code.co_varnames[0]) if code.co_argcount else None
    matches = [impl for impl in candidates if getattr(impl.function, "__self__", None) is instance]
    return matches[0] if instance is not None and len(matches) == 1 else None


def _who(impl: Any) -> str:
    return "a plugin that could not be told" if impl is None else f"plugin {impl.plugin_name!r}"


def _short_repr(value: Any) -> str:
    """The bad answer, bounded: a plugin may return something huge (or payload-bearing)."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}... ({type(value).__name__})"
