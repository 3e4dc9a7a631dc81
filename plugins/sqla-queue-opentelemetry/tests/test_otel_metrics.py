"""Metrics through the OpenTelemetry API: the Prometheus plugin's names, units and labels for
every lifecycle event, and gauges for the backlog read from the database at collection."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from sqla_queue_opentelemetry import OpenTelemetry
from sqlalchemy import func, update

import sqla_queue as sq
from sqla_queue.testing import drain

COUNTERS = (
    "sqla_queue_jobs_enqueued", "sqla_queue_jobs_deduplicated", "sqla_queue_jobs_claimed",
    "sqla_queue_jobs_completed", "sqla_queue_jobs_retried", "sqla_queue_jobs_failed",
    "sqla_queue_jobs_cancelled", "sqla_queue_jobs_snoozed", "sqla_queue_jobs_recovered",
    "sqla_queue_lost_claims", "sqla_queue_empty_claims",
)
"""sqla-queue-prometheus's counters (it exports each with ``_total``, as an OpenTelemetry
Prometheus exporter does)."""
HISTOGRAMS = ("sqla_queue_job_queue_wait_seconds", "sqla_queue_job_duration_seconds")


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def queue(engine, reader) -> sq.Queue:
    own = OpenTelemetry(meter_provider=MeterProvider(metric_readers=[reader]))
    return sq.Queue(engine, plugins=[own], load_entrypoints=False)


def points(reader: InMemoryMetricReader) -> dict[str, tuple[str, list]]:
    """name -> (unit, data points) of one collection."""
    found = {}
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found[metric.name] = (metric.unit, list(metric.data.data_points))
    return found


def value(found, name: str, **attributes) -> float | None:
    for point in found[name][1]:
        if dict(point.attributes) == attributes:
            return point.value if hasattr(point, "value") else point.count
    return None


def test_lifecycle_events_are_counted_with_the_prometheus_plugins_names_units_and_labels(queue, reader):
    name = f"metrics-{uuid.uuid4().hex[:8]}"
    queue.task(name="ok", queue=name)(lambda payload, ctx: None)
    queue.task(name="flaky", queue=name, max_attempts=2, retry_delay=timedelta(0))(
        lambda payload, ctx: 1 / 0)
    queue.enqueue("ok", {}, idempotency_key=f"{name}-1")
    queue.enqueue("ok", {}, idempotency_key=f"{name}-1")
    queue.enqueue("flaky", {})
    drain(queue, queues=[name])
    queue.claim(name, worker_id="w")  # empty
    found = points(reader)
    ok, flaky = {"queue": name, "task": "ok"}, {"queue": name, "task": "flaky"}
    assert value(found, "sqla_queue_jobs_enqueued", **ok) == 1
    assert value(found, "sqla_queue_jobs_deduplicated", **ok) == 1
    assert value(found, "sqla_queue_jobs_claimed", **flaky) == 2
    assert value(found, "sqla_queue_jobs_completed", **ok) == 1
    assert value(found, "sqla_queue_jobs_retried", **flaky) == 1
    assert value(found, "sqla_queue_jobs_failed", **flaky) == 1
    assert value(found, "sqla_queue_empty_claims", queue=name) >= 1
    assert value(found, "sqla_queue_job_duration_seconds", **ok) == 1  # one observation
    assert value(found, "sqla_queue_job_queue_wait_seconds", **flaky) == 2
    for histogram in HISTOGRAMS:
        unit, (point, *_) = found[histogram]
        assert unit == "s" and point.explicit_bounds[0] == 0.005 and point.explicit_bounds[-1] == 3600
    assert {name for name in COUNTERS if name in found} >= {
        "sqla_queue_jobs_enqueued", "sqla_queue_jobs_deduplicated", "sqla_queue_jobs_claimed",
        "sqla_queue_jobs_completed", "sqla_queue_jobs_retried", "sqla_queue_jobs_failed", "sqla_queue_empty_claims"}
    assert all(found[name][0] in ("{job}", "{claim}") for name in COUNTERS if name in found)


def test_backlog_and_oldest_eligible_age_are_read_from_the_database(queue, reader, engine):
    name = f"gauges-{uuid.uuid4().hex[:8]}"
    other = sq.Queue(engine, load_entrypoints=False)  # another process's enqueues count too
    other.task(name="ok", queue=name)(lambda payload, ctx: None)
    other.enqueue("ok", {})
    other.enqueue("ok", {})
    other.enqueue("ok", {}, delay=timedelta(hours=1))
    jobs = sq.Job.__table__
    with engine.begin() as conn:  # the due ones have waited 90 s
        conn.execute(update(jobs).where(jobs.c.queue_name == name, jobs.c.run_at <= func.now())
                     .values(run_at=jobs.c.run_at - timedelta(seconds=90)))
    found = points(reader)
    assert value(found, "sqla_queue_eligible_jobs", queue=name) == 2
    assert value(found, "sqla_queue_scheduled_jobs", queue=name) == 1
    age = value(found, "sqla_queue_oldest_eligible_age_seconds", queue=name)
    assert 90 <= age < 3600
    assert found["sqla_queue_oldest_eligible_age_seconds"][0] == "s"


def test_the_entry_points_instance_records_to_the_global_meter_provider(database_url, metric_reader):
    name = f"global-{uuid.uuid4().hex[:8]}"
    queue = sq.Queue(database_url, plugins=["opentelemetry"])
    queue.task(name="ok", queue=name)(lambda payload, ctx: None)
    queue.enqueue("ok", {})
    assert value(points(metric_reader), "sqla_queue_jobs_enqueued", queue=name, task="ok") == 1
    queue.engine.dispose()
