"""Calling a Queue's hooks through pluggy (``pm.hook.<name>(...)``), and naming the plugin that
broke a contract: an exception is traced to the implementation whose frame raised it, an answer
outside a strategy's contract to the implementation that gives it when asked alone.

Lifecycle events (`emit`, `emit_each`) isolate a failing observer; strategies
(`failure_decision`, `idempotency_key_asker`) leave a broken plugin out or refuse the enqueue;
`job_meta_asker` merges every answer; `handle_job` nests the run middleware around a handler.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any, Literal

import pluggy

from .. import _validate
from .._sanitize import calls_handlers
from .._tasks import Task
from ..errors import InvalidInputError, PluginError
from ..types import ClaimedJob, JobContext
from .builtins import logging as builtin_logging
from .entry_points import loaded_on_install, refuse_strategies_registered_by
from .manager import QueuePluginManager

logger = logging.getLogger("sqla_queue.plugins")

NO_DELAY = timedelta(0)
"""What no retry-delay opinion means: retry at once."""

KeyAsker = Callable[[Task, Mapping[str, Any], str, int, Any, Any], "str | None"]
"""``ask(task, payload, queue, max_attempts, run_at, delay)``: the key for a job enqueued
without an explicit one, or None."""


def heard(pm: pluggy.PluginManager, hook_name: str) -> bool:
    """Whether an event for lifecycle hook `hook_name` would reach anyone who acts on it: some
    implementation other than the built-in logging plugin, or that plugin with its logger
    enabled for the level it logs this event at (`builtins.logging.ignores`). Otherwise the
    event is neither built nor dispatched: the only listener would drop it unread. Any other
    plugin, a third-party observer or a built-in, always hears every event."""
    for impl in getattr(pm.hook, hook_name).get_hookimpls():
        if impl.plugin is not builtin_logging or not builtin_logging.ignores(hook_name):
            return True
    return False


def emit(pm: pluggy.PluginManager, hook_name: str, **kwargs: Any) -> None:
    """Call a lifecycle hook if it is `heard`; a plugin that raises is logged by name and the
    others are still called. The job's outcome is already committed: nothing a plugin does
    here changes it. A caller on a hot path asks `heard` before building the event."""
    hook = getattr(pm.hook, hook_name)
    if heard(pm, hook_name):
        try:
            hook(**kwargs)
        except Exception as exc:
            _isolate(pm, hook, kwargs, exc)


def emit_each(pm: pluggy.PluginManager, hook_name: str, events: Iterable[Any]) -> None:
    """`emit` for a batch of ``event=`` payloads (a claim's jobs, a round's completions).

    Whether the hook is `heard` is looked up once per batch, and `events` (a generator) is not
    even built when it is not: no per-job work on the worker's hot path. Otherwise each event
    is one pluggy call, with nothing of ours around it but a ``try``.
    """
    hook = getattr(pm.hook, hook_name)
    if heard(pm, hook_name):
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

    The task's ``retry_on=``/``no_retry_on=`` can only say no, before any plugin is asked.
    No opinion from anyone means retryable, and retry at once. A plugin that raises or answers
    outside its contract is logged as a `PluginError` naming it and left out of this decision:
    the remaining registered plugins decide (a blocked built-in is not among them). Raising
    into the worker would leave the job running until its lease expired.
    """
    task = _task_of(pm, job)
    if task is not None and task.own_retryable(error) is False:
        return False  # the task's retry_on / no_retry_on rule it out: no plugin is asked
    retryable = _decide(pm, "sqla_queue_is_retryable", job=job, error=error)
    if retryable is False or job.is_last_attempt:
        return False
    delay = _task_retry_delay(pm, job, error)
    if delay is None:
        delay = _decide(pm, "sqla_queue_retry_delay", job=job, error=error, attempt=job.attempts)
    return NO_DELAY if delay is None else delay


def _task_of(pm: QueuePluginManager, job: ClaimedJob) -> Task[Any] | None:
    return pm.tasks.get(job.task) if pm.tasks is not None else None


def _task_retry_delay(pm: QueuePluginManager, job: ClaimedJob, error: BaseException) -> Any:
    """The task's own ``retry_delay=``, asked before any plugin; a broken one defers to them."""
    task = _task_of(pm, job)
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
    """The retry-delay contract: ``False``, or a timedelta from zero to 100 years (not a bare
    number: seconds or milliseconds would be a guess; longer would overflow the due time)."""
    return value is False or (isinstance(value, timedelta) and timedelta(0) <= value <= _validate.MAX_DURATION)


def _is_usable_key(value: Any) -> bool:
    try:
        _validate.idempotency_key(value)
    except InvalidInputError:
        return False
    return True


_CONTRACTS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "sqla_queue_is_retryable": (lambda answer: isinstance(answer, bool), "True, False or None"),
    "sqla_queue_retry_delay": (is_delay_or_false, "a timedelta from 0 to 100 years, False or None"),
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


# -- enqueue metadata ---------------------------------------------------------------------

MetaAsker = Callable[[Task, Mapping[str, Any], str, int, Any, Any], "dict[str, Any] | None"]
"""``ask(task, payload, queue, max_attempts, run_at, delay)``: the keys the hooks add to a job's
``meta``, or None."""


def job_meta_asker(pm: pluggy.PluginManager) -> MetaAsker | None:
    """The `sqla_queue_job_meta` asker for one enqueue call, or None when nothing implements the
    hook (no per-job plugin work). Every answer is merged, the implementation pluggy asks first
    winning a key; an answer that is not a mapping with string keys, or an exception, is a
    `PluginError` naming the plugin, raised before anything is written."""
    hook = pm.hook.sqla_queue_job_meta
    if not hook.get_hookimpls():
        return None

    def ask(task: Task, payload: Mapping[str, Any], queue: str, max_attempts: int, run_at: Any,
            delay: Any) -> dict[str, Any] | None:
        kwargs = {"task": task.name, "payload": payload,
                  "options": {"queue": queue, "max_attempts": max_attempts, "run_at": run_at, "delay": delay}}
        try:
            answers = hook(**kwargs)
        except Exception as exc:
            culprit = _raised_by(_call_order(hook), exc)
            raise PluginError(f"{_who(culprit)} raised in sqla_queue_job_meta: {exc!r}") from exc
        merged: dict[str, Any] = {}
        for answer in reversed(answers):  # pluggy lists them in call order: the first asked wins
            if not _is_meta(answer):
                culprit = _answered_by(pm, hook, kwargs, _is_meta)
                raise PluginError(f"{_who(culprit)} returned {_short_repr(answer)} from sqla_queue_job_meta; "
                                  "expected a mapping with string keys, or None")
            merged.update(answer)
        return merged or None

    return ask


def _is_meta(value: Any) -> bool:
    return isinstance(value, Mapping) and all(isinstance(key, str) for key in value)


# -- run middleware -----------------------------------------------------------------------


@calls_handlers
def handle_job(pm: pluggy.PluginManager, job: ClaimedJob, ctx: JobContext, call: Callable[[], Any]) -> Any:
    """``call()`` (the handler) inside every `sqla_queue_handle_job` implementation, nested in
    the order pluggy calls them: the first asked is outermost, and each gets a ``call_next``
    that runs the rest. Without implementations, just ``call()``: nothing on the hot path.

    pluggy has no nesting of plain implementations (its wrappers are refused here, and a
    generator cannot await an async handler), so the chain is built from pluggy's own ordered
    implementations, each called with the arguments it asks for."""
    if isinstance(pm, QueuePluginManager) and job.task not in pm.key_parity_checked:
        check_key_parity(pm, job)
    caller = pm.hook.sqla_queue_handle_job
    if not caller.get_hookimpls():  # the usual case, once per job: no list built
        return call()
    order = _call_order(caller)
    if not order:
        return call()
    return _run_link(order, 0, {"job": job, "ctx": ctx}, call)


def check_key_parity(pm: QueuePluginManager, job: ClaimedJob) -> None:
    """Warn, once per task and process, when a job came without the idempotency key a dedupe
    plugin enabled *here* gives it: the process that enqueued it lacks the plugin (enabled by
    ``SQLA_QUEUE_PLUGINS`` on the worker only, say), so its enqueues are not deduplicated. Only
    the enqueuing side can dedupe, and only the worker sees both sides; a set lookup per job."""
    pm.key_parity_checked.add(job.task)
    impls = pm.hook.sqla_queue_idempotency_key.get_hookimpls()
    if not impls or job.idempotency_key is not None or job.scheduled_at is not None:
        return
    options = {"queue": job.queue, "max_attempts": job.max_attempts, "run_at": None, "delay": None}
    try:
        key = _ask(pm, "sqla_queue_idempotency_key", {"task": job.task, "payload": job.payload, "options": options})
    except _ContractBroken:
        return  # the enqueue side reports a broken plugin; here it only decides nothing
    if key is None:
        return
    names = ", ".join(sorted(str(pm.get_name(impl.plugin)) for impl in impls))
    logger.warning("job %s (task %r) was enqueued without the idempotency key that dedupe plugin %s, enabled in "
                   "this worker, gives it: the process that enqueued it does not have the plugin enabled, so its "
                   "enqueues are not deduplicated. Enable it there too (SQLA_QUEUE_PLUGINS=%s in its "
                   "environment, or Queue(plugins=[...])). Logged once per task.", job.id, job.task, names, names)


@calls_handlers
def _run_link(order: list[Any], position: int, arguments: dict[str, Any], call: Callable[[], Any]) -> Any:
    """The middleware at `position` of `order`, its ``call_next`` running the one after it."""
    if position == len(order):
        return call()
    impl = order[position]
    given = {**arguments, "call_next": functools.partial(_run_link, order, position + 1, arguments, call)}
    return impl.function(*(given[name] for name in impl.argnames))
