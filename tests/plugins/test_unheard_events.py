"""No event object for nobody: a lifecycle event is built and dispatched only when some
implementation would act on it (`plugins.calls.heard`). The built-in logging plugin drops
per-job events below its logger's level, so with only the built-ins at their default levels a
worker's drain and the enqueues before it build no per-job event; any other plugin (an
observer, a built-in logging level turned up) gets every event as before.

Constructions are counted by wrapping each event class's ``__init__``."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

import sqla_queue as sq
from sqla_queue import types
from sqla_queue.plugins import calls
from sqla_queue.plugins.builtins import logging as builtin_logging

FAST = {"poll_interval": 0.05, "lease": timedelta(seconds=6)}
EVENTS = ("JobEnqueued", "JobClaimed", "JobCompleted", "EmptyClaim", "JobRetried", "JobFailed")


@pytest.fixture
def built(monkeypatch) -> Counter:
    """How many of each event class were constructed during the test."""
    counts: Counter = Counter()
    for name in EVENTS:
        cls = getattr(types, name)
        original = cls.__init__

        def counting(self, *args, _original=original, _name=name, **kwargs):
            counts[_name] += 1
            _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", counting)
    return counts


def _drain(queue: sq.Queue, jobs: int):
    @queue.task(name="noop")
    def noop(payload, ctx):
        return None

    queue.enqueue("noop", {"n": 0})
    queue.enqueue_many([{"task": "noop", "payload": {"n": n}} for n in range(1, jobs)])
    return queue.worker(concurrency=4, **FAST).run(until_empty=True)


def test_with_only_the_built_ins_at_their_default_levels_no_per_job_event_is_built(
    make_queue, clean_jobs, built, library_logger
):
    library_logger.setLevel(logging.WARNING)
    summary = _drain(make_queue(), 30)

    assert summary.completed == 30
    assert built == Counter()


def test_an_observer_gets_every_event_as_before(make_queue, clean_jobs, built, library_logger, recorder):
    library_logger.setLevel(logging.WARNING)
    summary = _drain(make_queue(plugins=[recorder]), 30)

    assert summary.completed == 30
    assert len(recorder.of("enqueued")) == len(recorder.of("claimed")) == len(recorder.of("completed")) == 30
    assert recorder.of("empty_claim")  # the drain ends on a claim that found nothing
    assert built["JobEnqueued"] == built["JobClaimed"] == built["JobCompleted"] == 30
    assert built["EmptyClaim"] == len(recorder.of("empty_claim"))


def test_the_built_in_logging_plugin_gets_the_events_its_level_lets_through(
    make_queue, clean_jobs, built, library_logger, caplog
):
    library_logger.setLevel(logging.INFO)  # completions log at INFO; claims and enqueues at DEBUG
    with caplog.at_level(logging.INFO, logger="sqla_queue"):
        _drain(make_queue(), 10)

    completed = [r for r in caplog.records if getattr(r, "outcome", None) == "completed"]
    assert len(completed) == built["JobCompleted"] == 10
    assert built["JobClaimed"] == built["JobEnqueued"] == 0


def test_a_retry_event_is_built_while_its_level_is_enabled_and_not_below_it(
    make_queue, clean_jobs, built, library_logger, caplog
):
    queue = make_queue()
    first, second = queue.enqueue_many([{"task": "send_email", "payload": {}}] * 2)
    tokens = {job.id: job.claim_token for job in queue.claim(worker_id="w", limit=2)}

    library_logger.setLevel(logging.CRITICAL)
    assert queue.retry(first, tokens[first], error="flaky").status is sq.JobStatus.PENDING
    assert built["JobRetried"] == 0

    library_logger.setLevel(logging.WARNING)  # retries log at WARNING, the default
    with caplog.at_level(logging.WARNING, logger="sqla_queue"):
        assert queue.retry(second, tokens[second], error="flaky").status is sq.JobStatus.PENDING
    assert built["JobRetried"] == 1
    assert [r.job_id for r in caplog.records if getattr(r, "outcome", None) == "retried"] == [second]


def _sample_event(hook_name: str):
    now = datetime.now(timezone.utc)
    return {
        "sqla_queue_job_enqueued": types.JobEnqueued(1, "q", "t", False),
        "sqla_queue_job_claimed": types.JobClaimed(1, "q", "t", 1, "w", None),
        "sqla_queue_job_completed": types.JobCompleted(1, "q", "t", 1, None),
        "sqla_queue_job_retried": types.JobRetried(1, "q", "t", 1, now, "e"),
        "sqla_queue_job_failed": types.JobFailed(1, "q", "t", 1, "e"),
        "sqla_queue_job_snoozed": types.JobSnoozed(1, "q", "t", 1, now, 1),
        "sqla_queue_job_cancelled": types.JobCancelled(1, "q", "t", 1, True),
        "sqla_queue_job_recovered": types.JobRecovered(1, "q", "t", sq.JobStatus.PENDING),
        "sqla_queue_lost_claim": types.LostClaim(1, "token", "gone", "complete"),
        "sqla_queue_empty_claim": types.EmptyClaim("q", "w", 1),
    }[hook_name]


@pytest.mark.parametrize("hook_name", sorted(builtin_logging.LEVELS))
def test_the_logging_plugin_logs_each_event_at_the_level_the_rule_reads(hook_name, library_logger, caplog):
    """The table `heard` reads is the truth: at its level the hook logs one record at that
    level; one level up it logs nothing and says it ignores the event."""
    level = builtin_logging.LEVELS[hook_name]
    hook = getattr(builtin_logging, hook_name)
    event = _sample_event(hook_name)

    library_logger.setLevel(level)
    with caplog.at_level(level, logger="sqla_queue"):
        hook(event=event)
    assert [r.levelno for r in caplog.records] == [level]
    assert not builtin_logging.ignores(hook_name)

    caplog.clear()
    library_logger.setLevel(level + 1)
    hook(event=event)
    assert caplog.records == []
    assert builtin_logging.ignores(hook_name)


@pytest.mark.parametrize("hook_name", sorted(builtin_logging.LEVELS))
def test_heard_is_false_only_when_every_listener_is_the_logging_plugin_below_its_level(
    hook_name, make_queue, library_logger, recorder
):
    level = builtin_logging.LEVELS[hook_name]
    alone = make_queue().plugin_manager
    observed = make_queue(plugins=[recorder]).plugin_manager
    unlogged = make_queue(blocked_plugins=["sqla_queue.logging"]).plugin_manager

    library_logger.setLevel(level + 1)
    assert not calls.heard(alone, hook_name)
    assert calls.heard(observed, hook_name)
    assert not calls.heard(unlogged, hook_name)

    library_logger.setLevel(level)
    assert calls.heard(alone, hook_name)
    assert calls.heard(observed, hook_name)
