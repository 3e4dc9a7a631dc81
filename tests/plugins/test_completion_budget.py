"""At ``INFO`` the built-in logging plugin writes at most `COMPLETIONS_PER_SECOND` completion
records a second; past that the completions are not logged one by one (the worker's progress
line counts them) and, once the second's budget is spent, their events are not even built.
``DEBUG`` logs every one."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta

import pytest

import sqla_queue as sq
from sqla_queue import types
from sqla_queue.plugins import calls
from sqla_queue.plugins.builtins import logging as builtin_logging
from sqla_queue.worker.slots import PREFETCH_PER_HANDLER

FAST = {"poll_interval": 0.05, "lease": timedelta(seconds=6)}
JOBS = 300


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_allows_so_many_a_second_and_starts_again_the_next():
    clock = Clock()
    budget = builtin_logging.CompletionBudget(3, clock=clock)
    assert [budget.spend() for _ in range(5)] == [True, True, True, False, False]
    assert not budget.left()
    clock.now += 0.5  # the same second
    assert not budget.left() and not budget.spend()
    clock.now += 0.6  # the next one
    assert budget.left()
    assert [budget.spend() for _ in range(4)] == [True, True, True, False]


@pytest.fixture
def built(monkeypatch) -> Counter:
    counts: Counter = Counter()
    original = types.JobCompleted.__init__

    def counting(self, *args, **kwargs):
        counts["JobCompleted"] += 1
        original(self, *args, **kwargs)

    monkeypatch.setattr(types.JobCompleted, "__init__", counting)
    return counts


def _drain(queue: sq.Queue) -> sq.WorkerSummary:
    @queue.task(name="noop")
    def noop(payload, ctx):
        return None

    queue.enqueue_many([{"task": "noop", "payload": {"n": n}} for n in range(JOBS)])
    return queue.worker(concurrency=10, **FAST).run(until_empty=True)


def _completion_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "outcome", None) == "completed"]


def test_a_fast_drain_at_info_logs_a_budget_of_completions_and_builds_few_events(
    make_queue, clean_jobs, library_logger, caplog, built, monkeypatch
):
    seconds = Clock()  # the budget's clock stands still: one second, however long the drain
    monkeypatch.setattr(builtin_logging, "completion_budget", builtin_logging.CompletionBudget(20, clock=seconds))
    library_logger.setLevel(logging.INFO)
    with caplog.at_level(logging.INFO, logger="sqla_queue"):
        summary = _drain(make_queue())

    assert summary.completed == JOBS
    assert len(_completion_records(caplog)) == 20
    # Events are built for the batches that arrive while the budget lasts (a batch is at most
    # the worker's slots, here 10 handlers and at most PREFETCH_PER_HANDLER each prefetched),
    # none after.
    assert 20 <= built["JobCompleted"] <= 20 + 10 * (1 + PREFETCH_PER_HANDLER)


def test_at_debug_every_completion_is_logged(make_queue, clean_jobs, library_logger, caplog, monkeypatch):
    monkeypatch.setattr(builtin_logging, "completion_budget", builtin_logging.CompletionBudget(20, clock=Clock()))
    library_logger.setLevel(logging.DEBUG)
    with caplog.at_level(logging.DEBUG, logger="sqla_queue"):
        summary = _drain(make_queue())

    assert summary.completed == JOBS
    assert len(_completion_records(caplog)) == JOBS


def test_a_spent_budget_silences_only_the_logging_plugin(make_queue, library_logger, recorder, monkeypatch):
    spent = builtin_logging.CompletionBudget(1, clock=Clock())
    assert spent.spend()
    monkeypatch.setattr(builtin_logging, "completion_budget", spent)
    library_logger.setLevel(logging.INFO)

    assert builtin_logging.ignores("sqla_queue_job_completed")
    assert not calls.heard(make_queue().plugin_manager, "sqla_queue_job_completed")
    assert calls.heard(make_queue(plugins=[recorder]).plugin_manager, "sqla_queue_job_completed")
    # Failures are never budgeted: each one is logged.
    assert not builtin_logging.ignores("sqla_queue_job_retried")
    assert not builtin_logging.ignores("sqla_queue_job_failed")
