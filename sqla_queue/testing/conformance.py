"""Conformance checks for third-party plugins, run in the plugin's own tests.

Each check takes the plugin (a module or an object with ``@sqla_queue.hookimpl`` methods) and
a real database (an Engine, a URL or a Queue whose table to use; see
`sqla_queue.testing.migrated_database`), registers the plugin in a Queue as any application
would, asks it alone for its answers through that Queue's pluggy manager, then drives real jobs
through a Queue with the plugin registered. A broken
contract raises `ConformanceError` (an AssertionError) naming the plugin, the hook and the
input; success returns a small report to assert on further.

The checks write jobs only on a queue of their own (``sqla_queue.conformance.*``) and delete
them afterwards. `check_lifecycle_plugin` also runs one lease-recovery pass, which recovers
*every* expired lease in the table: run it against a test database, never a live one.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Mapping

from ..errors import NonRetryableError
from ..hookspecs import LIFECYCLE_HOOKS
from ..queue import Queue
from ..types import ClaimedJob, JobStatus
from ._harness import (
    BUILTIN_STRATEGIES,
    ConformanceError,
    EventRecorder,
    Target,
    alone,
    conformance_queue,
    database_now,
    delete_queue_jobs,
    implemented,
    loads_on_install,
    plugin_errors,
    plugin_queue,
    registered_name,
    require_hook,
    unique_queue_name,
)
from ._run_and_meta import MetaReport, MiddlewareReport, check_meta_plugin, check_run_middleware
from ._samples import edge_events, reordered, sample_errors, sample_payloads

MAX_KEY_LENGTH = 512
"""The documented limit of an idempotency key (docs/reference/hooks.md)."""


# -- backoff ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BackoffReport:
    """What the plugin answered: every sampled answer per attempt, and the answers that were
    applied to real jobs with the ``run_at`` the database computed from them."""

    plugin: str
    answers: dict[int, list[timedelta | bool | None]]
    applied: list[tuple[int, timedelta, Any]] = field(default_factory=list)
    loads_on_install: bool = False
    """Always False for a backoff: installed, it takes part only when enabled by name."""


def check_backoff_plugin(
    plugin: object,
    target: Target,
    *,
    attempts: int = 25,
    samples: int = 20,
    max_delay: timedelta = timedelta(days=7),
    allow_give_up: bool = False,
    task: str = "conformance_backoff",
) -> BackoffReport:
    """Check a `sqla_queue_retry_delay` plugin for attempts ``1..attempts``.

    Every answer must be ``None``, ``False`` (only with `allow_give_up`) or a timedelta in
    ``[0, max_delay]``; the plugin must answer for some attempt; no error type may make it
    raise. Then, for the first, a middle and the last attempt, a real job is failed through
    ``Queue.handle_failure`` and its ``run_at`` must be the database's clock plus the answer.
    """
    queue = plugin_queue(target, plugin)
    ask = require_hook(queue, plugin, "sqla_queue_retry_delay")
    name = registered_name(queue, plugin)
    answers = {n: _sample_delays(ask, name, n, samples, max_delay, allow_give_up, task)
               for n in range(1, attempts + 1)}
    if all(answer is None for values in answers.values() for answer in values):
        raise ConformanceError(f"plugin {name!r} never answered sqla_queue_retry_delay for task {task!r}")
    report = BackoffReport(plugin=name, answers=answers, loads_on_install=loads_on_install(queue, plugin))
    for attempt in sorted({1, (attempts + 1) // 2, attempts}):
        report.applied.append(_apply_delay(plugin, name, target, task, attempt, attempts))
    return report


def _sample_delays(ask, name, attempt, samples, max_delay, allow_give_up, task) -> list[Any]:
    answers = []
    for index in range(samples):
        error = sample_errors()[index % len(sample_errors())]
        job = _synthetic_job(task, job_id=attempt * 1000 + index, attempt=attempt)
        where = f"attempt {attempt} ({type(error).__name__}, job {job.id})"
        try:
            answer = ask(job=job, error=error, attempt=attempt)
        except Exception as exc:
            raise ConformanceError(f"plugin {name!r} raised {exc!r} in sqla_queue_retry_delay for {where}") from exc
        _check_delay(answer, name, where, max_delay, allow_give_up)
        answers.append(answer)
    return answers


def _check_delay(answer: Any, name: str, where: str, max_delay: timedelta, allow_give_up: bool) -> None:
    if answer is None:
        return
    if not (answer is False or (isinstance(answer, timedelta) and answer >= timedelta(0))):
        raise ConformanceError(
            f"plugin {name!r} returned {answer!r} from sqla_queue_retry_delay for {where}; "
            "expected a non-negative timedelta, False or None"
        )
    if answer is False and not allow_give_up:
        raise ConformanceError(
            f"plugin {name!r} gave up (False) at {where}; pass allow_give_up=True if it means to"
        )
    if answer is not False and answer > max_delay:
        raise ConformanceError(f"plugin {name!r} asked for {answer} at {where}, more than max_delay {max_delay}")


def _apply_delay(plugin, name, target, task, attempt, attempts) -> tuple[int, Any, Any]:
    """Fail a real job at `attempt` and compare its new ``run_at`` with the plugin's answer,
    as recorded when the Queue asked (no built-in strategy is registered to answer instead)."""
    queue = conformance_queue(target, [plugin], blocked=BUILTIN_STRATEGIES)
    recorder = _RecordedAnswers("sqla_queue_retry_delay")
    queue.plugin_manager.add_hookcall_monitoring(recorder.before, recorder.after)
    queue_name = unique_queue_name("backoff")
    queue.task(name=task, queue=queue_name, max_attempts=attempts + 1)(_never_called)
    try:
        queue.enqueue(task, {"attempt": attempt})
        (job,) = queue.claim(queue_name, worker_id="sqla_queue.conformance")
        job = replace(job, attempts=attempt)  # the hook sees attempt N; the row stays claimable
        before = database_now(queue)
        outcome = queue.handle_failure(job, RuntimeError("conformance check"))
        after = database_now(queue)
    finally:
        delete_queue_jobs(queue, queue_name)
    answer = recorder.answers[-1] if recorder.answers else None
    _check_applied(name, attempt, answer, outcome, before, after)
    return attempt, answer, outcome.run_at if outcome else None


def _check_applied(name, attempt, answer, outcome, before, after) -> None:
    if outcome is None:
        raise ConformanceError(f"the conformance job lost its claim at attempt {attempt}")
    if answer is False:
        if outcome.status is not JobStatus.FAILED:
            raise ConformanceError(f"plugin {name!r} gave up at attempt {attempt} but the job is {outcome.status}")
        return
    if outcome.status is not JobStatus.PENDING:
        raise ConformanceError(f"plugin {name!r}: the job is {outcome.status} after attempt {attempt}, not pending")
    if isinstance(answer, timedelta) and not before + answer <= outcome.run_at <= after + answer:
        raise ConformanceError(
            f"plugin {name!r} answered {answer} at attempt {attempt}, but the job runs at "
            f"{outcome.run_at.isoformat()}, not between {(before + answer).isoformat()} and "
            f"{(after + answer).isoformat()}"
        )


class _RecordedAnswers:
    """pluggy hook-call monitoring that remembers every answer one hook call gave the Queue."""

    def __init__(self, hook_name: str) -> None:
        self.hook_name = hook_name
        self.answers: list[Any] = []

    def before(self, hook_name: str, impls: Any, kwargs: Any) -> None:
        pass

    def after(self, outcome: Any, hook_name: str, impls: Any, kwargs: Any) -> None:
        if hook_name == self.hook_name and outcome.exception is None:
            self.answers.append(outcome.get_result())


# -- dedupe -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DedupeReport:
    """The key the plugin gave each sample payload (in sample order)."""

    plugin: str
    keys: list[str | None]
    loads_on_install: bool = False
    """Always False for a dedupe plugin: installed, it takes part only when enabled by name."""


def check_dedupe_plugin(
    plugin: object,
    target: Target,
    *,
    task: str = "conformance_dedupe",
    payloads: list[dict[str, Any]] | None = None,
    distinct: bool = True,
) -> DedupeReport:
    """Check a `sqla_queue_idempotency_key` plugin.

    For each payload the key must be ``None`` or a valid key (non-empty, printable, at most
    512 characters), the same on every call, for a deep copy, and for the same payload with
    its keys in another order (recursively); the payload must not be mutated. With `distinct`,
    different payloads must get different keys. Then, on the real database (in a transaction
    that is rolled back), enqueueing a payload and its reordered twin must give one job, and a
    different payload another.
    """
    queue = plugin_queue(target, plugin)
    ask = require_hook(queue, plugin, "sqla_queue_idempotency_key")
    name = registered_name(queue, plugin)
    samples = payloads if payloads is not None else sample_payloads()
    keys = [_stable_key(ask, name, task, payload) for payload in samples]
    if all(key is None for key in keys):
        raise ConformanceError(f"plugin {name!r} returned no key for any sample payload of task {task!r}")
    if distinct:
        _check_distinct(name, samples, keys)
    keyed = [(payload, key) for payload, key in zip(samples, keys) if key is not None]
    _check_collapses(plugin, name, target, task, keyed)
    return DedupeReport(plugin=name, keys=keys, loads_on_install=loads_on_install(queue, plugin))


def _stable_key(ask, name: str, task: str, payload: dict[str, Any]) -> str | None:
    before = json.dumps(payload, sort_keys=True)
    options = {"queue": "default", "max_attempts": 5, "run_at": None, "delay": None}
    variants = {"the payload": payload, "a deep copy": copy.deepcopy(payload),
                "the payload with keys reordered": reordered(payload)}
    found: dict[str, Any] = {}
    for label, variant in variants.items():
        try:
            found[label] = ask(task=task, payload=variant, options=dict(options))
        except Exception as exc:
            raise ConformanceError(f"plugin {name!r} raised {exc!r} for {label} {_brief(payload)}") from exc
    if json.dumps(payload, sort_keys=True) != before:
        raise ConformanceError(f"plugin {name!r} mutated the payload it was given")
    key = found["the payload"]
    _check_key(name, key, payload)
    for label, other in found.items():
        if other != key:
            raise ConformanceError(
                f"plugin {name!r} is unstable: {key!r} for the payload but {other!r} for {label} "
                f"({_brief(payload)})"
            )
    return key


def _check_key(name: str, key: Any, payload: Mapping[str, Any]) -> None:
    """The key contract as documented: None, or a non-empty printable str of at most 512
    characters."""
    if key is None:
        return
    if not isinstance(key, str):
        problem = f"idempotency_key must be a string, got {type(key).__name__}"
    elif not key:
        problem = "idempotency_key must not be empty"
    elif len(key) > MAX_KEY_LENGTH:
        problem = f"idempotency_key is {len(key)} characters long; the limit is {MAX_KEY_LENGTH}"
    elif not key.isprintable():
        problem = "idempotency_key contains control or non-printable characters"
    else:
        return
    raise ConformanceError(f"plugin {name!r} returned an unusable key for {_brief(payload)}: {problem}")


def _check_distinct(name: str, samples: list[dict[str, Any]], keys: list[str | None]) -> None:
    seen: dict[str, dict[str, Any]] = {}
    for payload, key in zip(samples, keys):
        if key is None:
            continue
        if key in seen and _canonical(seen[key]) != _canonical(payload):
            raise ConformanceError(
                f"plugin {name!r} gave different payloads the same key {key!r}: "
                f"{_brief(seen[key])} and {_brief(payload)}"
            )
        seen[key] = payload


def _check_collapses(plugin, name, target, task, keyed: list[tuple[dict[str, Any], str]]) -> None:
    """Two enqueues share a job exactly when the plugin gave them the same key."""
    queue = conformance_queue(target, [plugin])
    queue.task(name=task, queue=unique_queue_name("dedupe"))(_never_called)
    with queue.engine.connect() as conn, conn.begin() as transaction:
        ids = [queue.enqueue(task, payload, connection=conn) for payload, _ in keyed]
        twins = [queue.enqueue(task, reordered(payload), connection=conn) for payload, _ in keyed]
        transaction.rollback()
    if ids != twins:
        raise ConformanceError(f"plugin {name!r}: reordered payloads were enqueued as new jobs ({ids} vs {twins})")
    job_of_key = dict(zip((key for _, key in keyed), ids))
    if len(set(ids)) != len(job_of_key) or any(job_of_key[key] != job_id for (_, key), job_id in zip(keyed, ids)):
        raise ConformanceError(f"plugin {name!r}: jobs {ids} do not match the keys the plugin gave")


# -- lifecycle ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LifecycleReport:
    """The hooks the plugin implements, and how often each event fired in the real run."""

    plugin: str
    hooks: tuple[str, ...]
    events: dict[str, int]
    loads_on_install: bool = True
    """True when it only observes (lifecycle hooks, ``sqla_queue_configure``): installed, every
    Queue registers it. False if it also implements a strategy hook: then only when enabled by
    name (``plugins=["name"]``, ``SQLA_QUEUE_PLUGINS``, ``sqla-queue --plugin``)."""


def check_lifecycle_plugin(plugin: object, target: Target) -> LifecycleReport:
    """Check a metrics/observability plugin: it survives every lifecycle event.

    First each implemented hook is called alone with edge-case events (missing durations,
    zero durations, long and non-ASCII names, both recovery outcomes): none may raise. Then one
    real run with the plugin registered fires every event (enqueued, deduplicated, claimed,
    completed, retried, failed, snoozed, cancelled, empty claim, recovered, lost claim): the plugin must log no
    error and every job must end where the queue alone would put it.
    """
    alone_queue = plugin_queue(target, plugin)
    name = registered_name(alone_queue, plugin)
    hooks = tuple(hook for hook in LIFECYCLE_HOOKS if hook in implemented(alone_queue, plugin))
    if not hooks:
        raise ConformanceError(f"plugin {name!r} implements no lifecycle hook")
    for hook in hooks:
        _survives_edge_events(alone(alone_queue, plugin, hook), name, hook)
    recorder = EventRecorder()
    queue = conformance_queue(target, [plugin, recorder])
    with plugin_errors() as errors:
        states = _lifecycle_run(queue)
    mine = [message for message in errors if repr(name) in message]
    if mine:
        raise ConformanceError(f"plugin {name!r} raised in a lifecycle hook: {mine[0]}")
    _check_states(name, states)
    missing = [hook for hook in LIFECYCLE_HOOKS if not recorder.counts[hook]]
    if missing:
        raise ConformanceError(f"the lifecycle run did not fire {', '.join(missing)}")
    return LifecycleReport(plugin=name, hooks=hooks, events=dict(recorder.counts),
                           loads_on_install=loads_on_install(alone_queue, plugin))


def _survives_edge_events(ask: Any, name: str, hook: str) -> None:
    for event in edge_events(hook):
        try:
            ask(event=event)
        except Exception as exc:
            raise ConformanceError(f"plugin {name!r} raised {exc!r} in {hook} for {event!r}") from exc


def _lifecycle_run(queue: Queue) -> dict[str, JobStatus | None]:
    """Drive one job to each end state and fire every event; return where each job ended."""
    name = unique_queue_name("lifecycle")
    task = queue.task(name="conformance_lifecycle", queue=name, max_attempts=3,
                      retry_delay=timedelta(0))(_never_called)
    try:
        done = queue.enqueue(task, {"job": "completes"}, idempotency_key=f"{name}:done")
        queue.enqueue(task, {"job": "completes"}, idempotency_key=f"{name}:done")  # deduplicated
        (job,) = queue.claim(name, worker_id="conformance")
        queue.complete(job.id, job.claim_token)
        failed = queue.enqueue(task, {"job": "fails"})
        (job,) = queue.claim(name, worker_id="conformance")
        queue.handle_failure(job, RuntimeError("first attempt fails"))
        (job,) = queue.claim(name, worker_id="conformance")
        queue.handle_failure(job, NonRetryableError("second attempt gives up"))
        queue.claim(name, worker_id="conformance")  # empty
        snoozed = queue.enqueue(task, {"job": "snoozes"})
        (job,) = queue.claim(name, worker_id="conformance")
        queue.snooze(job, timedelta(days=1))
        cancelled = queue.enqueue(task, {"job": "is cancelled while running"})
        (job,) = queue.claim(name, worker_id="conformance")
        queue.cancel(job.id)
        queue.complete(job.id, job.claim_token)  # ends cancelled: a cancel was requested
        lost = queue.enqueue(task, {"job": "is recovered"})
        (job,) = queue.claim(name, worker_id="conformance", lease=timedelta(microseconds=1))
        queue.recover_expired()  # that claim's own lease has run out
        queue.complete(job.id, job.claim_token)  # lost claim: recovery took it
        return {label: _status(queue, job_id)
                for label, job_id in (("completed", done), ("failed", failed), ("snoozed", snoozed),
                                      ("cancelled", cancelled), ("recovered", lost))}
    finally:
        delete_queue_jobs(queue, name)


def _status(queue: Queue, job_id: int) -> JobStatus | None:
    view = queue.get_job(job_id)
    return None if view is None else view.status


def _check_states(name: str, states: dict[str, JobStatus | None]) -> None:
    expected = {"completed": JobStatus.COMPLETED, "failed": JobStatus.FAILED, "snoozed": JobStatus.PENDING,
                "cancelled": JobStatus.CANCELLED, "recovered": JobStatus.PENDING}
    for label, status in expected.items():
        if states[label] is not status:
            raise ConformanceError(
                f"with plugin {name!r} registered, the job that should be {label} ended {states[label]}"
            )


# -- helpers ------------------------------------------------------------------------------


def _synthetic_job(task: str, *, job_id: int, attempt: int) -> ClaimedJob:
    return ClaimedJob(id=job_id, task=task, payload={}, attempts=attempt,
                      max_attempts=max(attempt + 1, 5), claim_token="conformance", queue="default")


def _never_called(payload: Any, ctx: Any) -> None:  # pragma: no cover - checks never run handlers
    raise AssertionError("conformance jobs are never run")


def _canonical(payload: Mapping[str, Any]) -> str:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"))


def _brief(payload: Mapping[str, Any]) -> str:
    text = _canonical(payload)
    return text if len(text) <= 60 else f"{text[:57]}..."


__all__ = [
    "BackoffReport",
    "ConformanceError",
    "DedupeReport",
    "LifecycleReport",
    "MetaReport",
    "MiddlewareReport",
    "check_backoff_plugin",
    "check_dedupe_plugin",
    "check_lifecycle_plugin",
    "check_meta_plugin",
    "check_run_middleware",
]
