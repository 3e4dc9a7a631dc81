"""sqla_queue.testing's conformance checks: the built-ins pass, and each kind of broken plugin
fails with a message naming it. A check that passed everything would prove nothing."""

from __future__ import annotations

import hashlib
import json
import random
from datetime import timedelta

import pytest

import sqla_queue as sq
from sqla_queue.plugins.builtins import backoff
from sqla_queue.plugins.builtins import logging as logging_plugin
from sqla_queue.testing import (
    ConformanceError,
    check_backoff_plugin,
    check_dedupe_plugin,
    check_lifecycle_plugin,
    check_meta_plugin,
    check_run_middleware,
)

# -- backoff ------------------------------------------------------------------------------


def test_the_builtin_backoff_conforms_and_its_answers_are_applied_by_the_database(engine, count_jobs):
    report = check_backoff_plugin(backoff, engine, attempts=20, samples=10)
    assert report.plugin == "sqla_queue.plugins.builtins.backoff"
    assert sorted(report.answers) == list(range(1, 21))
    assert all(timedelta(0) <= d <= timedelta(hours=1) for ds in report.answers.values() for d in ds)
    assert [attempt for attempt, _, _ in report.applied] == [1, 10, 20]
    assert count_jobs("queue_name LIKE 'sqla_queue.conformance.%'") == 0


def test_a_backoff_can_be_checked_against_a_queue_and_its_model(queue):
    report = check_backoff_plugin(backoff, queue, attempts=3, samples=2)
    assert len(report.applied) == 3


class Delay:
    """A backoff whose answer is a function of the attempt."""

    def __init__(self, answer):
        self.answer = answer

    @sq.hookimpl
    def sqla_queue_retry_delay(self, attempt):
        return self.answer(attempt)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda attempt: 5, r"returned 5 .*attempt 1.*expected a non-negative timedelta"),
        (lambda attempt: timedelta(seconds=-attempt), r"returned .*days=-1.*attempt 1"),
        (lambda attempt: timedelta(days=attempt), r"asked for 8 days, 0:00:00 at attempt 8"),
        (lambda attempt: False if attempt > 3 else timedelta(0), r"gave up \(False\) at attempt 4"),
        (lambda attempt: None, r"never answered sqla_queue_retry_delay"),
        (lambda attempt: 1 / 0 if attempt == 2 else timedelta(seconds=attempt), r"raised ZeroDivisionError.*attempt 2"),
    ],
)
def test_a_broken_backoff_fails_the_check_naming_the_plugin(engine, answer, message):
    with pytest.raises(ConformanceError, match=rf"(?s)plugin 'test_conformance\.Delay' {message}"):
        check_backoff_plugin(Delay(answer), engine, attempts=10, samples=3)


def test_giving_up_is_accepted_when_allowed_and_fails_the_real_job(engine):
    report = check_backoff_plugin(
        Delay(lambda attempt: False if attempt >= 5 else timedelta(seconds=attempt)),
        engine, attempts=6, samples=2, allow_give_up=True,
    )
    assert report.answers[6] == [False, False]
    assert report.applied[-1][1] is False


def test_a_random_backoff_is_compared_with_the_answer_the_queue_really_got(engine):
    """Every call answers differently; the applied check uses the answer recorded at the
    moment the Queue asked, so randomness is no excuse for a run_at it cannot explain."""
    report = check_backoff_plugin(Delay(lambda attempt: timedelta(seconds=random.randint(1, 100))), engine,
                                  attempts=2, samples=2)
    for _, answer, run_at in report.applied:
        assert timedelta(seconds=1) <= answer <= timedelta(seconds=100) and run_at is not None


def test_a_plugin_without_the_hook_fails_the_backoff_check(engine):
    with pytest.raises(ConformanceError, match="does not implement sqla_queue_retry_delay"):
        check_backoff_plugin(logging_plugin, engine)


def test_a_plugin_with_a_wrong_argument_cannot_even_register(engine):
    class Wrong:
        @sq.hookimpl
        def sqla_queue_retry_delay(self, retries):
            return None

    with pytest.raises(ConformanceError, match="cannot be registered"):
        check_backoff_plugin(Wrong(), engine)


# -- dedupe -------------------------------------------------------------------------------


class Key:
    def __init__(self, make):
        self.make = make

    @sq.hookimpl
    def sqla_queue_idempotency_key(self, task, payload):
        return self.make(task, payload)


def sorted_hash(task, payload):
    return hashlib.sha256(f"{task}:{json.dumps(payload, sort_keys=True)}".encode()).hexdigest()


def test_a_stable_content_key_conforms_and_leaves_no_job_behind(engine, count_jobs):
    before = count_jobs()
    report = check_dedupe_plugin(Key(sorted_hash), engine)
    assert len(report.keys) == len(set(report.keys)) == 9
    assert count_jobs() == before


def test_a_dedupe_plugin_that_never_keys_fails_the_check(engine):
    with pytest.raises(ConformanceError, match="returned no key for any sample payload"):
        check_dedupe_plugin(Key(lambda task, payload: None), engine)


def test_a_hook_wrapper_cannot_even_register(engine):
    class Wrapping:
        @sq.hookimpl(wrapper=True)
        def sqla_queue_idempotency_key(self):
            return (yield)

    with pytest.raises(ConformanceError, match="cannot be registered: .*as a hook wrapper"):
        check_dedupe_plugin(Wrapping(), engine)


def mutating(task, payload):
    payload.pop("to", None)
    return sorted_hash(task, payload)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda task, payload: hashlib.sha256(json.dumps(payload).encode()).hexdigest(),
         r"is unstable: .* for the payload with keys reordered"),
        (lambda task, payload: str(random.random()), r"is unstable"),
        (lambda task, payload: 42, r"returned an unusable key .*must be a string"),
        (lambda task, payload: "k" * 600, r"returned an unusable key .*the limit is 512"),
        (lambda task, payload: "same", r"gave different payloads the same key 'same'"),
        (lambda task, payload: payload["to"], r"raised KeyError\('to'\)"),
        (mutating, r"mutated the payload"),
    ],
)
def test_a_broken_dedupe_plugin_fails_the_check_naming_it(engine, make, message):
    with pytest.raises(ConformanceError, match=rf"plugin 'test_conformance\.Key' {message}"):
        check_dedupe_plugin(Key(make), engine)


def test_distinct_can_be_waived_for_a_deliberately_coarse_key(engine):
    coarse = Key(lambda task, payload: f"{task}:{payload.get('to', '-')}")
    report = check_dedupe_plugin(coarse, engine, distinct=False,
                                 payloads=[{"to": "a", "n": 1}, {"to": "a", "n": 2}, {"to": "b"}])
    assert report.keys == ["conformance_dedupe:a", "conformance_dedupe:a", "conformance_dedupe:b"]


# -- lifecycle ----------------------------------------------------------------------------


def test_the_builtin_logging_plugin_survives_every_event(engine, count_jobs):
    report = check_lifecycle_plugin(logging_plugin, engine)
    assert len(report.hooks) == 10
    assert report.events["sqla_queue_job_enqueued"] == 6
    assert all(report.events[hook] >= 1 for hook in report.hooks)
    assert count_jobs("queue_name LIKE 'sqla_queue.conformance.%'") == 0


class Durations:
    """A metrics plugin that forgot the duration can be missing."""

    def __init__(self):
        self.total = 0.0

    @sq.hookimpl
    def sqla_queue_job_completed(self, event):
        self.total += event.duration.total_seconds()


def test_a_plugin_that_assumes_a_duration_fails_on_the_edge_events(engine):
    with pytest.raises(ConformanceError, match=r"'test_conformance\.Durations' raised AttributeError.*sqla_queue_job_completed"):
        check_lifecycle_plugin(Durations(), engine)


class FailsOnRealJobs:
    """Passes the edge events, raises on the real run's recovery (its queue is ours)."""

    @sq.hookimpl
    def sqla_queue_job_recovered(self, event):
        if event.queue.startswith("sqla_queue.conformance."):
            raise RuntimeError("cannot reach the metrics backend")


def test_a_plugin_that_raises_in_the_real_run_fails_the_check(engine):
    with pytest.raises(ConformanceError, match=r"'test_conformance\.FailsOnRealJobs' raised in a lifecycle hook"):
        check_lifecycle_plugin(FailsOnRealJobs(), engine)


def test_a_plugin_without_lifecycle_hooks_fails_the_lifecycle_check(engine):
    with pytest.raises(ConformanceError, match="implements no lifecycle hook"):
        check_lifecycle_plugin(backoff, engine)


# -- the harness is a client of the public API ------------------------------------------------


@pytest.mark.parametrize("module", ["conformance.py", "_harness.py", "_samples.py"])
def test_the_harness_imports_no_private_module_of_sqla_queue(module):
    """It checks plugins the way their own tests would use sqla_queue: a private name it needed
    would be one a plugin author cannot rely on."""
    import ast
    from pathlib import Path

    import sqla_queue.testing

    tree = ast.parse((Path(sqla_queue.testing.__file__).parent / module).read_text())
    private = [
        f"{'.' * node.level}{node.module or ''}" for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level >= 2 and node.module
        and any(part.startswith("_") for part in node.module.split("."))
    ]
    private += [
        f"{'.' * node.level}{node.module or ''}:{alias.name}" for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level >= 2
        for alias in node.names if alias.name.startswith("_")
    ]
    private += [
        alias.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names if alias.name.startswith("sqla_queue._")
    ]
    private += [
        node.module for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("sqla_queue._")
    ]
    assert private == []


# -- meta ---------------------------------------------------------------------------------


class Tenant:
    """A meta plugin: every job carries the tenant it was enqueued for."""

    plugin_name = "tenant"

    def __init__(self, answer=lambda task, payload: {"tenant": "acme", "task": task}):
        self.answer = answer

    @sq.hookimpl
    def sqla_queue_job_meta(self, task, payload):
        return self.answer(task, payload)


def test_a_meta_plugin_conforms_and_its_answers_reach_the_jobs_and_their_handlers(engine, count_jobs):
    report = check_meta_plugin(Tenant(), engine)
    assert report.answers[0] == {"tenant": "acme", "task": "conformance_meta"}
    assert report.stored["enqueue_many"] == [{"tenant": "acme", "task": "conformance_meta"}] * 3
    assert set(report.stored) == {"enqueue", "enqueue_many", "enqueue_async"}
    assert report.loads_on_install is False
    assert count_jobs("queue_name LIKE 'sqla_queue.conformance.%'") == 0


def _mutates(task, payload):
    payload["added"] = True
    return {"ok": 1}


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda task, payload: ["not", "a", "mapping"], r"returned \['not', 'a', 'mapping'\] .*expected a mapping"),
        (lambda task, payload: {1: "int key"}, r"expected a mapping with string keys"),
        (lambda task, payload: {"when": object()}, r"meta with no JSON form"),
        (lambda task, payload: 1 / 0, r"raised ZeroDivisionError"),
        (lambda task, payload: None, r"added no meta for any sample payload"),
        (_mutates, r"mutated the payload"),
    ],
)
def test_a_broken_meta_plugin_fails_the_check_naming_it(engine, answer, message):
    with pytest.raises(ConformanceError, match=message) as failure:
        check_meta_plugin(Tenant(answer), engine)
    assert "'tenant'" in str(failure.value) or "tenant" in str(failure.value)


def test_the_meta_check_requires_the_hook(engine):
    with pytest.raises(ConformanceError, match="does not implement sqla_queue_job_meta"):
        check_meta_plugin(logging_plugin, engine)


# -- run middleware -----------------------------------------------------------------------


class Timing:
    """A transparent run middleware, sync and async."""

    plugin_name = "timing"

    def __init__(self):
        self.wrapped = []

    @sq.hookimpl
    def sqla_queue_handle_job(self, job, ctx, call_next):
        self.wrapped.append(job.id)
        if ctx.is_async:
            async def timed():
                return await call_next()
            return timed()
        return call_next()


class Swallows:
    plugin_name = "swallows"

    @sq.hookimpl
    def sqla_queue_handle_job(self, ctx, call_next):
        if ctx.is_async:
            return call_next()
        try:
            return call_next()
        except Exception:
            return None


class CallsTwice:
    plugin_name = "calls_twice"

    @sq.hookimpl
    def sqla_queue_handle_job(self, ctx, call_next):
        if not ctx.is_async:
            try:
                call_next()
            except BaseException:
                pass
        return call_next()


class Replaces:
    plugin_name = "replaces"

    @sq.hookimpl
    def sqla_queue_handle_job(self, ctx, call_next):
        value = call_next()
        return value if ctx.is_async else {"replaced": True}


def test_a_transparent_middleware_conforms_around_every_kind_of_handler(engine, count_jobs):
    timing = Timing()
    report = check_run_middleware(timing, engine)
    assert report.outcomes["raises"] == ["retried", "failed"]
    assert report.outcomes["async returns"] == ["completed"]
    assert len(timing.wrapped) == 10  # every attempt, retries included
    assert report.loads_on_install is False
    assert count_jobs("queue_name LIKE 'sqla_queue.conformance.%'") == 0


@pytest.mark.parametrize(
    ("plugin", "message"),
    [
        (Swallows(), r"'swallows': the job that raises ended \['completed'\], expected \['retried', 'failed'\]"),
        (CallsTwice(), r"'calls_twice': the handler of the job that returns was called 2 times in 1 attempts"),
        (Replaces(), r"'replaces': the job that returns stored result \{'replaced': True\}"),
    ],
)
def test_a_middleware_that_changes_outcomes_fails_the_check_naming_it(engine, plugin, message):
    with pytest.raises(ConformanceError, match=message):
        check_run_middleware(plugin, engine)


def test_the_middleware_check_requires_the_hook(engine):
    with pytest.raises(ConformanceError, match="does not implement sqla_queue_handle_job"):
        check_run_middleware(Tenant(), engine)
