"""The worker's per-minute sample (`sqla_queue.services.sampling.Sampler`): due once per interval at the
sampler's own offset into it, one statement each, a database error logged and tried again next
interval; a running worker fills the history, and ``sample_interval=None`` turns it off."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import text

import sqla_queue as sq
from sqla_queue.errors import ConfigurationError
from sqla_queue.services.sampling import Sampler

WEEK = timedelta(days=7)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def sampled_queue(committed_queue, engine):
    """The committed queue on empty job, counters and samples tables (other tests' jobs and
    empty claims in the same minute would be sampled too), with one pending job to sample, at
    least 15 s before the database's next minute (so the test's samples all describe one
    minute)."""
    queue = committed_queue
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE sqla_queue_jobs_samples, sqla_queue_jobs_counters"))
        seconds = float(conn.execute(text("SELECT extract(second FROM now())")).scalar_one())
    if seconds > 45:
        time.sleep(61 - seconds)
    queue.enqueue("resize", {})
    yield queue
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE sqla_queue_jobs_samples, sqla_queue_jobs_counters"))


def test_a_sample_is_due_once_per_interval_at_the_samplers_offset(sampled_queue):
    clock = Clock(6000.0)  # 100 minutes since the epoch, on the minute
    sampler = Sampler(sampled_queue.core, retention=WEEK, clock=clock, offset=20.0)

    assert sampler.run_if_due() is None
    clock.now = 6019.9
    assert sampler.run_if_due() is None
    clock.now = 6020.0
    written = sampler.run_if_due()
    assert written in (0, 1)  # 0 only if the real minute's sample existed already
    clock.now = 6079.9
    assert sampler.run_if_due() is None
    clock.now = 6095.0  # the loop woke late: due, and the next one stays at 6140
    assert sampler.run_if_due() is not None
    clock.now = 6139.0
    assert sampler.run_if_due() is None
    clock.now = 6140.0
    assert sampler.run_if_due() is not None
    assert len(sampled_queue.history()) == 1  # the real minute is written once


def test_a_database_error_is_logged_and_the_worker_goes_on(engine, caplog, create_database):
    from sqlalchemy import create_engine

    url = create_database(migrate=False)
    bare = create_engine(url)
    try:
        queue = sq.Queue(bare, load_entrypoints=False)  # no schema at all
        clock = Clock(0.0)
        sampler = Sampler(queue.core, retention=WEEK, clock=clock, offset=1.0)
        clock.now = 1.0
        assert sampler.run_if_due() is None
    finally:
        bare.dispose()
    assert "could not record the queue's per-minute sample" in caplog.text


@pytest.mark.parametrize(("options", "field"), [
    ({"sample_interval": 0}, "sample_interval"),
    ({"sample_interval": "often"}, "sample_interval"),
    ({"sample_retention": 0}, "sample_retention"),
    ({"sample_retention": "a week"}, "sample_retention"),
])
def test_bad_sampling_options_are_configuration_errors(queue, options, field):
    with pytest.raises(ConfigurationError, match=field):
        queue.worker(**options)


def run_worker_until(worker, predicate, timeout: float = 30.0) -> None:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        give_up = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < give_up, "timed out waiting for the worker"
            time.sleep(0.05)
    finally:
        worker.stop()
        thread.join(30)


def test_a_running_worker_records_the_history(sampled_queue):
    worker = sampled_queue.worker(queues=["default"], sample_interval=0.2, poll_interval=0.05)
    run_worker_until(worker, lambda: sampled_queue.history())
    points = sampled_queue.history()
    assert {(point.queue, point.pending, point.eligible) for point in points} == {("images", 1, 1)}


def test_a_worker_told_not_to_sample_writes_no_history(sampled_queue):
    sampled_queue.enqueue("send_email", {})
    worker = sampled_queue.worker(queues=["default"], sample_interval=None, poll_interval=0.05)
    run_worker_until(worker, lambda: sampled_queue.get_job(2).status is sq.JobStatus.COMPLETED)
    assert sampled_queue.history() == []
