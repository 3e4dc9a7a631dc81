"""Conformance checks for the two hooks around a job's life: `check_meta_plugin`
(`sqla_queue_job_meta`, at enqueue) and `check_run_middleware` (`sqla_queue_handle_job`, around
every handler call). Re-exported by `sqla_queue.testing.conformance`."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..errors import Snooze
from ..queue import Queue
from ._harness import (
    ConformanceError,
    Target,
    conformance_queue,
    delete_queue_jobs,
    loads_on_install,
    plugin_queue,
    registered_name,
    require_hook,
    unique_queue_name,
)
from ._samples import sample_payloads
from .handlers import drain

# -- meta ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetaReport:
    """What the plugin added to each sample payload's job (in sample order), and the meta the
    real jobs were stored with, by how they were enqueued."""

    plugin: str
    answers: list[dict[str, Any] | None]
    stored: dict[str, list[dict[str, Any] | None]]
    loads_on_install: bool = False
    """Always False: a meta plugin changes what is stored, so it takes part only when enabled."""


def check_meta_plugin(plugin: object, target: Target, *, task: str = "conformance_meta") -> MetaReport:
    """Check a `sqla_queue_job_meta` plugin.

    Asked alone for each sample payload, the answer must be ``None`` or a mapping with string
    keys whose values have a JSON form, and the payload must not be mutated. Then real jobs are
    enqueued every way an application does -- ``enqueue``, ``enqueue_many`` (the hook asked once
    per job), in the caller's transaction (rolled back: no job may remain), and
    ``enqueue_async`` -- each must be stored with the answer the plugin gave for it, and its
    handler must read that meta as ``ctx.meta``.
    """
    queue = plugin_queue(target, plugin)
    ask = require_hook(queue, plugin, "sqla_queue_job_meta")
    name = registered_name(queue, plugin)
    answers = [_sample_meta(ask, name, task, payload) for payload in sample_payloads()]
    if all(answer is None for answer in answers):
        raise ConformanceError(f"plugin {name!r} added no meta for any sample payload of task {task!r}")
    stored = _stored_meta(plugin, name, target, task)
    return MetaReport(plugin=name, answers=answers, stored=stored, loads_on_install=loads_on_install(queue, plugin))


def _sample_meta(ask: Any, name: str, task: str, payload: dict[str, Any]) -> dict[str, Any] | None:
    before = json.dumps(payload, sort_keys=True)
    options = {"queue": "default", "max_attempts": 5, "run_at": None, "delay": None}
    try:
        answer = ask(task=task, payload=payload, options=options)
    except Exception as exc:
        raise ConformanceError(f"plugin {name!r} raised {exc!r} in sqla_queue_job_meta") from exc
    if json.dumps(payload, sort_keys=True) != before:
        raise ConformanceError(f"plugin {name!r} mutated the payload it was given")
    answer = answer[0] if answer else None  # the caller lists the answers that are not None
    if answer is None:
        return None
    if not hasattr(answer, "items") or not all(isinstance(key, str) for key in answer):
        raise ConformanceError(f"plugin {name!r} returned {answer!r} from sqla_queue_job_meta; "
                               "expected a mapping with string keys, or None")
    try:
        json.dumps(dict(answer))
    except (TypeError, ValueError) as exc:
        raise ConformanceError(f"plugin {name!r} returned meta with no JSON form: {exc}") from None
    return dict(answer)


def _stored_meta(plugin: object, name: str, target: Target, task: str) -> dict[str, list[dict[str, Any] | None]]:
    queue = _both_faces(target, plugin)
    queue_name = unique_queue_name("meta")
    seen: list[Any] = []
    queue.task(name=task, queue=queue_name)(lambda payload, ctx: seen.append(dict(ctx.meta)))
    calls = _AnswerLog()
    queue.plugin_manager.add_hookcall_monitoring(calls.before, calls.after)
    try:
        ids: dict[str, list[int]] = {}
        expected: dict[str, list[dict[str, Any]]] = {}
        ids["enqueue"] = [queue.enqueue(task, {"n": 0})]
        expected["enqueue"] = calls.take(1)
        ids["enqueue_many"] = queue.enqueue_many([{"task": task, "payload": {"n": n}} for n in (1, 2, 3)])
        expected["enqueue_many"] = calls.take(3)
        ids["enqueue_async"] = [asyncio.run(queue.enqueue_async(task, {"n": 4}))]
        expected["enqueue_async"] = calls.take(1)
        _check_rolled_back(queue, name, task, calls)
        stored = {how: [queue.get_job(job_id).meta for job_id in job_ids] for how, job_ids in ids.items()}
        for how, metas in stored.items():
            if metas != [answer or None for answer in expected[how]]:
                raise ConformanceError(f"plugin {name!r}: jobs enqueued by {how} were stored with meta {metas}, "
                                       f"not the plugin's answers {expected[how]}")
        drain(queue, queues=[queue_name])
        if sorted(map(_canonical, seen)) != sorted(_canonical(m or {}) for ms in stored.values() for m in ms):
            raise ConformanceError(f"plugin {name!r}: handlers read ctx.meta {seen}, not the stored meta")
        return stored
    finally:
        delete_queue_jobs(queue, queue_name)
        queue.engine.dispose()


def _check_rolled_back(queue: Queue, name: str, task: str, calls: _AnswerLog) -> None:
    """An enqueue in the caller's transaction asks the plugin like any other and, rolled back,
    leaves nothing behind."""
    with queue.engine.connect() as conn, conn.begin() as transaction:
        job_id = queue.enqueue(task, {"n": 5}, connection=conn)
        transaction.rollback()
    calls.take(1)
    if queue.get_job(job_id) is not None:
        raise ConformanceError(f"plugin {name!r}: a job enqueued in a rolled-back transaction exists")


def _both_faces(target: Target, plugin: object) -> Queue:
    """A Queue with only `plugin`, built from the database URL so it serves asyncio too."""
    engine = target.engine if isinstance(target, Queue) else target
    url = engine if isinstance(engine, str) else engine.url.render_as_string(hide_password=False)
    model = target.model if isinstance(target, Queue) else None
    if model is None:
        return Queue(url, plugins=[plugin], load_entrypoints=False)
    return Queue(url, model=model, plugins=[plugin], load_entrypoints=False)


class _AnswerLog:
    """pluggy hook-call monitoring: the merged answer of every `sqla_queue_job_meta` call."""

    def __init__(self) -> None:
        self.answers: list[dict[str, Any]] = []

    def before(self, hook_name: str, impls: Any, kwargs: Any) -> None:
        pass

    def after(self, outcome: Any, hook_name: str, impls: Any, kwargs: Any) -> None:
        if hook_name == "sqla_queue_job_meta" and outcome.exception is None:
            merged: dict[str, Any] = {}
            for answer in reversed(outcome.get_result()):
                merged.update(answer or {})
            self.answers.append(json.loads(json.dumps(merged)))

    def take(self, count: int) -> list[dict[str, Any]]:
        if len(self.answers) != count:
            raise ConformanceError(f"sqla_queue_job_meta was asked {len(self.answers)} times, expected {count} "
                                   "(once per job)")
        taken, self.answers = self.answers, []
        return taken


# -- run middleware -----------------------------------------------------------------------


@dataclass(frozen=True)
class MiddlewareReport:
    """How each conformance job ended with the middleware around its handler."""

    plugin: str
    outcomes: dict[str, list[str]]
    loads_on_install: bool = False
    """Always False: run middleware can change a job's outcome, so it is enabled by name."""


class _ConformanceBaseError(BaseException):
    """Not an Exception: a middleware must let it through (``except Exception`` does)."""


_JOBS = {
    # label: (payload, async handler?, the outcomes of its attempts in order)
    "returns": ({"do": "return"}, False, ["completed"]),
    "raises": ({"do": "raise"}, False, ["retried", "failed"]),
    "raises BaseException": ({"do": "raise_base"}, False, ["retried", "failed"]),
    "snoozes": ({"do": "snooze"}, False, ["snoozed"]),
    "async returns": ({"do": "return"}, True, ["completed"]),
    "async raises": ({"do": "raise"}, True, ["retried", "failed"]),
    "carries odd meta": ({"do": "return", "meta": True}, False, ["completed"]),
}
_ODD_META = {"traceparent": "not a trace context", "baggage": "%%%", "tenant": {"id": 7}}
"""Meta the middleware did not write (another process's, a caller's): it must still run."""


def check_run_middleware(plugin: object, target: Target) -> MiddlewareReport:
    """Check a `sqla_queue_handle_job` plugin that wraps handlers without changing their outcome
    (tracing, error reporting, timing).

    Real jobs run through the middleware, with synchronous and ``async def`` handlers that return
    a value, raise an exception, raise a `BaseException`, snooze, or carry meta the plugin did
    not write; retried jobs run a second attempt. Each attempt must call its handler exactly
    once, and each job must end exactly as it would without the plugin: the value stored as its
    result, the exception's type in its ``last_error``, a snooze a snooze. A middleware that
    means to change outcomes (a policy) is not what this check is for.
    """
    queue = plugin_queue(target, plugin)
    require_hook(queue, plugin, "sqla_queue_handle_job")
    name = registered_name(queue, plugin)
    running = conformance_queue(target, [plugin])
    queue_name = unique_queue_name("middleware")
    calls: Counter[int] = Counter()
    _register_handlers(running, queue_name, calls)
    try:
        ids = {label: running.enqueue("conformance_async" if is_async else "conformance_sync", payload,
                                      meta=_ODD_META if payload.get("meta") else None)
               for label, (payload, is_async, _) in _JOBS.items()}
        ran = drain(running, queues=[queue_name])
        outcomes = {label: [r.outcome for r in ran if r.job.id == job_id] for label, job_id in ids.items()}
        _check_outcomes(name, running, ids, outcomes, calls)
    finally:
        delete_queue_jobs(running, queue_name)
    return MiddlewareReport(plugin=name, outcomes=outcomes, loads_on_install=loads_on_install(queue, plugin))


def _register_handlers(queue: Queue, queue_name: str, calls: Counter[int]) -> None:
    def act(payload: dict[str, Any], ctx: Any) -> Any:
        calls[ctx.job_id] += 1
        if payload["do"] == "raise":
            raise RuntimeError("conformance attempt fails")
        if payload["do"] == "raise_base":
            raise _ConformanceBaseError("conformance attempt fails")
        if payload["do"] == "snooze":
            raise Snooze(timedelta(days=1))
        return {"job": ctx.job_id}

    async def act_async(payload: dict[str, Any], ctx: Any) -> Any:
        await asyncio.sleep(0)
        return act(payload, ctx)

    options = {"queue": queue_name, "max_attempts": 2, "retry_delay": timedelta(0)}
    queue.task(name="conformance_sync", **options)(act)
    queue.task(name="conformance_async", **options)(act_async)


def _check_outcomes(name: str, queue: Queue, ids: dict[str, int], outcomes: dict[str, list[str]],
                    calls: Counter[int]) -> None:
    for label, (payload, _, expected) in _JOBS.items():
        job_id = ids[label]
        if outcomes[label] != expected:
            raise ConformanceError(f"plugin {name!r}: the job that {label} ended {outcomes[label]}, expected {expected}")
        if calls[job_id] != len(expected):
            raise ConformanceError(f"plugin {name!r}: the handler of the job that {label} was called "
                                   f"{calls[job_id]} times in {len(expected)} attempts")
        view = queue.get_job(job_id)
        if expected[-1] == "completed" and view.result != {"job": job_id}:
            raise ConformanceError(f"plugin {name!r}: the job that {label} stored result {view.result!r}, "
                                   "not its handler's return value")
        error = {"raise": "RuntimeError", "raise_base": "_ConformanceBaseError"}.get(payload["do"])
        if error is not None and error not in (view.last_error or ""):
            raise ConformanceError(f"plugin {name!r}: the job that {label} failed with {view.last_error!r}, "
                                   f"not its handler's {error}")


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
