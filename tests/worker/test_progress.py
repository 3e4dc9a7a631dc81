"""The worker's progress line: every `PROGRESS_EVERY` seconds, at ``INFO``, what it finished
since the last line; nothing while it finishes nothing."""

from __future__ import annotations

import logging
from datetime import timedelta

from sqla_queue.worker.config import WorkerSummary
from sqla_queue.worker.progress import PROGRESS_EVERY, Progress

FAST = {"poll_interval": 0.05, "lease": timedelta(seconds=6)}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_line_says_what_finished_since_the_last_one_and_how_fast(caplog):
    clock, tally = Clock(), WorkerSummary()
    progress = Progress("w1", lambda: WorkerSummary(**vars(tally)), every=30, clock=clock)

    clock.now += 29
    tally.claimed, tally.completed = 100, 90
    assert progress.run_if_due() is None  # not due yet

    clock.now += 1
    with caplog.at_level(logging.INFO, logger="sqla_queue.worker"):
        line = progress.run_if_due()
    assert line is not None and line.done.completed == 90 and line.seconds == 30
    [record] = caplog.records
    assert record.getMessage() == "worker w1: 90 completed (3/s) in the last 30s"
    assert (record.levelno, record.outcome, record.completed, record.worker_id) == (logging.INFO, "progress", 90, "w1")

    caplog.clear()
    clock.now += 30
    tally.completed, tally.retried, tally.failed = 90 + 3_000, 2, 1
    with caplog.at_level(logging.INFO, logger="sqla_queue.worker"):
        progress.run_if_due()
    assert caplog.records[0].getMessage() == "worker w1: 3,000 completed (100/s), 2 retried, 1 failed in the last 30s"


def test_no_line_while_nothing_finishes(caplog):
    clock, tally = Clock(), WorkerSummary()
    progress = Progress("w1", lambda: WorkerSummary(**vars(tally)), every=30, clock=clock)
    tally.claimed = 5  # claimed, still running: nothing finished
    with caplog.at_level(logging.INFO, logger="sqla_queue.worker"):
        for _ in range(3):
            clock.now += 30
            assert progress.run_if_due() is None
    assert caplog.records == []


def test_a_worker_logs_progress_between_rounds(queue, caplog, monkeypatch):
    """The worker runs the line as one of its periodic services (here every 0.2 s)."""
    monkeypatch.setattr("sqla_queue.worker.progress.PROGRESS_EVERY", 0.2)

    @queue.task(name="slowish")
    def slowish(payload, ctx):
        import time
        time.sleep(0.05)

    queue.enqueue_many([{"task": "slowish", "payload": {}}] * 20)
    with caplog.at_level(logging.INFO, logger="sqla_queue.worker"):
        summary = queue.worker(concurrency=2, **FAST).run(until_empty=True)

    assert summary.completed == 20
    lines = [r for r in caplog.records if getattr(r, "outcome", None) == "progress"]
    assert lines, [r.getMessage() for r in caplog.records]
    assert sum(r.completed for r in lines) <= 20


def test_the_logging_docs_state_the_interval_and_the_budget():
    """docs/how-to/run-workers.md ("Logging") promises both numbers: they are read from the code."""
    from pathlib import Path

    from sqla_queue.plugins.builtins.logging import COMPLETIONS_PER_SECOND

    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "how-to" / "run-workers.md").read_text().split())
    assert f"up to {COMPLETIONS_PER_SECOND} a second per process" in text
    assert f"Every {PROGRESS_EVERY:g} seconds in which it finished anything" in text
