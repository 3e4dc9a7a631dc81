"""The Prometheus plugin with a registry of its own: conformance, counts, gauges, serving."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import urllib.request
import uuid
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import text
from sqlalchemy.engine import make_url

import sqla_queue as sq
from sqla_queue.testing import check_lifecycle_plugin
from sqla_queue_prometheus import PORT_ENV, PrometheusMetrics, plugin, serve, wsgi_app


@pytest.fixture
def metrics() -> PrometheusMetrics:
    return PrometheusMetrics(CollectorRegistry())


@pytest.fixture
def queue(engine, metrics) -> sq.Queue:
    return sq.Queue(engine, plugins=[metrics], load_entrypoints=False)


def run_some_jobs(queue: sq.Queue, name: str) -> None:
    """Two completions (one deduplicated enqueue), one retry then terminal failure, one empty
    claim, one recovery followed by a lost claim."""
    queue.task(name="ok", queue=name)(lambda payload, ctx: None)
    queue.task(name="flaky", queue=name, max_attempts=2, retry_delay=timedelta(0))(lambda payload, ctx: None)
    queue.enqueue("ok", {"n": 1}, idempotency_key=f"{name}-1")
    queue.enqueue("ok", {"n": 1}, idempotency_key=f"{name}-1")
    queue.enqueue("ok", {"n": 2})
    for job in queue.claim(name, worker_id="w", limit=2):
        queue.complete(job.id, job.claim_token)
    queue.enqueue("flaky", {})
    for _ in range(2):
        (job,) = queue.claim(name, worker_id="w")
        queue.handle_failure(job, RuntimeError("down"))
    queue.claim(name, worker_id="w")
    queue.enqueue("ok", {"n": 3})
    (job,) = queue.claim(name, worker_id="w", lease=timedelta(microseconds=1))
    queue.recover_expired()
    queue.complete(job.id, job.claim_token)


def test_passes_the_lifecycle_conformance_check(engine, metrics):
    report = check_lifecycle_plugin(metrics, engine)
    assert set(report.hooks) == {
        "sqla_queue_job_enqueued", "sqla_queue_job_claimed", "sqla_queue_job_completed",
        "sqla_queue_job_retried", "sqla_queue_job_failed", "sqla_queue_job_recovered",
        "sqla_queue_lost_claim", "sqla_queue_empty_claim", "sqla_queue_job_cancelled",
        "sqla_queue_job_snoozed",
    }
    assert report.loads_on_install is True


def test_counts_cancelled_and_snoozed_jobs_and_shows_a_pause(queue, metrics):
    name = f"control-{uuid.uuid4().hex[:8]}"
    queue.task(name="ok", queue=name)(lambda payload, ctx: None)
    queue.cancel(queue.enqueue("ok", {}))
    running = queue.enqueue("ok", {})
    (job,) = queue.claim(name, worker_id="w")
    queue.snooze(job, 0)
    (job,) = queue.claim(name, worker_id="w")
    queue.cancel(running)
    queue.complete(job.id, job.claim_token)  # ends cancelled: the request came first
    value = metrics.registry.get_sample_value
    ok = {"queue": name, "task": "ok"}
    assert value("sqla_queue_jobs_cancelled_total", {**ok, "while_running": "false"}) == 1
    assert value("sqla_queue_jobs_cancelled_total", {**ok, "while_running": "true"}) == 1
    assert value("sqla_queue_jobs_snoozed_total", ok) == 1
    assert value("sqla_queue_jobs", {"queue": name, "status": "cancelled"}) == 2
    assert value("sqla_queue_paused", {"queue": name}) == 0
    queue.pause(name)
    try:
        assert value("sqla_queue_paused", {"queue": name}) == 1
    finally:
        queue.resume(name)


def test_counts_every_lifecycle_event_by_queue_and_task(queue, metrics):
    name = f"metrics-{uuid.uuid4().hex[:8]}"
    run_some_jobs(queue, name)
    value = metrics.registry.get_sample_value
    ok, flaky = {"queue": name, "task": "ok"}, {"queue": name, "task": "flaky"}
    assert value("sqla_queue_jobs_enqueued_total", ok) == 3
    assert value("sqla_queue_jobs_deduplicated_total", ok) == 1
    assert value("sqla_queue_jobs_claimed_total", ok) == 3
    assert value("sqla_queue_jobs_completed_total", ok) == 2
    assert value("sqla_queue_job_duration_seconds_count", ok) == 2
    assert value("sqla_queue_job_queue_wait_seconds_count", flaky) == 2
    assert value("sqla_queue_jobs_retried_total", flaky) == 1
    assert value("sqla_queue_jobs_failed_total", flaky) == 1
    assert value("sqla_queue_jobs_recovered_total", {**ok, "status": "pending"}) == 1
    assert value("sqla_queue_lost_claims_total", {"operation": "complete"}) >= 1
    assert value("sqla_queue_empty_claims_total", {"queue": name}) == 1


def test_health_gauges_are_read_from_the_database_at_scrape_time(queue, metrics):
    name = f"health-{uuid.uuid4().hex[:8]}"
    run_some_jobs(queue, name)
    queue.enqueue("ok", {"later": True}, delay=timedelta(hours=1))
    queue.enqueue("flaky", {"single": "attempt"}, max_attempts=1)  # near its limit from the start
    value = metrics.registry.get_sample_value
    assert value("sqla_queue_jobs", {"queue": name, "status": "pending"}) == 3
    assert value("sqla_queue_jobs", {"queue": name, "status": "running"}) == 0
    assert value("sqla_queue_eligible_jobs", {"queue": name}) == 2
    assert value("sqla_queue_scheduled_jobs", {"queue": name}) == 1
    assert value("sqla_queue_oldest_eligible_age_seconds", {"queue": name}) > 0
    assert value("sqla_queue_near_max_attempts_jobs", {"queue": name}) == 1
    assert value("sqla_queue_health_up") == 1


def test_every_number_queue_stats_returns_becomes_a_gauge(queue, metrics):
    name = f"fields-{uuid.uuid4().hex[:8]}"
    run_some_jobs(queue, name)
    health = queue.stats()[name]
    numbers = [f.name for f in dataclasses.fields(health)
               if isinstance(getattr(health, f.name), (int, float, timedelta)) or f.name == "oldest_eligible_age"]
    samples = [sample for family in metrics.health.collect() if family.name != "sqla_queue_live_workers"
               for sample in family.samples if sample.labels.get("queue") == name]
    assert len(samples) == len(numbers) >= 7


def test_live_workers_per_queue_come_from_the_worker_registry(queue, metrics, engine):
    served, unserved = f"served-{uuid.uuid4().hex[:8]}", f"unserved-{uuid.uuid4().hex[:8]}"
    queue.task(name="ok")(lambda payload, ctx: None)
    queue.enqueue("ok", {}, queue=unserved)
    with engine.begin() as conn:  # three workers' rows as they write them; one stopped beating
        for worker_id, expires in ((f"{served}-a", "1 minute"), (f"{served}-b", "1 minute"),
                                   (f"{served}-dead", "-1 second")):
            conn.execute(text(
                "INSERT INTO sqla_queue_jobs_workers (id, host, pid, version, queues, tasks, concurrency, "
                "expires_at) VALUES (:id, 'h', 1, 'v', ARRAY[:queue], ARRAY['ok'], 1, "
                "now() + CAST(:expires AS interval))"), {"id": worker_id, "queue": served, "expires": expires})
    value = metrics.registry.get_sample_value
    try:
        assert value("sqla_queue_live_workers", {"queue": served}) == 2  # the dead one does not count
        assert value("sqla_queue_live_workers", {"queue": unserved}) == 0  # jobs, and nobody serving them
    finally:
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM sqla_queue_jobs_workers WHERE id LIKE :prefix"), {"prefix": f"{served}-%"})


def test_a_queue_built_from_an_async_engine_is_scraped_too(engine, metrics):
    """An asyncio application's Queue refuses synchronous calls; the scrape still reads it."""
    from sqlalchemy.ext.asyncio import create_async_engine

    url = make_url(engine.url.render_as_string(hide_password=False)).set(drivername="postgresql+psycopg_async")
    async_engine = create_async_engine(url)
    queue = sq.Queue(async_engine, plugins=[metrics], load_entrypoints=False)
    name = f"async-{uuid.uuid4().hex[:8]}"
    queue.task(name="ok", queue=name)(lambda payload, ctx: None)
    asyncio.run(queue.enqueue_async("ok", {}))
    asyncio.run(async_engine.dispose())

    assert metrics.registry.get_sample_value("sqla_queue_jobs", {"queue": name, "status": "pending"}) == 1
    assert metrics.registry.get_sample_value("sqla_queue_health_up") == 1


def test_an_unreachable_database_reports_health_down_instead_of_failing_the_scrape(engine, metrics):
    missing = make_url(engine.url.render_as_string(hide_password=False)).set(database="sqlaq_does_not_exist")
    queue = sq.Queue(missing.render_as_string(hide_password=False), plugins=[metrics], load_entrypoints=False)
    assert metrics.registry.get_sample_value("sqla_queue_health_up") == 0
    assert queue.plugin_manager.get_plugin(queue.plugin_manager.get_name(metrics)) is metrics


def test_serves_metrics_over_http(queue, metrics):
    name = f"http-{uuid.uuid4().hex[:8]}"
    run_some_jobs(queue, name)
    server = serve(0, "127.0.0.1", metrics.registry)
    with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    assert f'sqla_queue_jobs_completed_total{{queue="{name}",task="ok"}} 2.0' in text
    assert f'sqla_queue_jobs{{queue="{name}",status="pending"}} 1.0' in text
    assert serve(0, "127.0.0.1", metrics.registry) is server


def test_wsgi_app_answers_with_the_metrics(queue, metrics):
    name = f"wsgi-{uuid.uuid4().hex[:8]}"
    run_some_jobs(queue, name)
    replies = []
    body = b"".join(wsgi_app(metrics.registry)(
        {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": ""},
        lambda status, headers: replies.append(status),
    ))
    assert replies == ["200 OK"]
    assert f'sqla_queue_jobs_failed_total{{queue="{name}",task="flaky"}} 1.0' in body.decode()


def test_a_bad_port_setting_stops_the_queue_from_being_built(engine, metrics, monkeypatch):
    monkeypatch.setenv(PORT_ENV, "nine-thousand")
    with pytest.raises(sq.PluginError, match=PORT_ENV):
        sq.Queue(engine, plugins=[metrics], load_entrypoints=False)


def test_registers_only_through_the_sqla_queue_entry_point():
    (entry_point,) = importlib.metadata.entry_points(group="sqla_queue", name="prometheus")
    assert entry_point.load() is plugin


def test_installed_it_loads_with_every_queue_as_an_observer(engine, monkeypatch):
    monkeypatch.delenv("SQLA_QUEUE_BLOCKED_PLUGINS", raising=False)
    monkeypatch.delenv("SQLA_QUEUE_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv(PORT_ENV, raising=False)
    assert sq.Queue(engine).plugin_manager.get_plugin("prometheus") is plugin
    assert sq.Queue(engine, blocked_plugins=["prometheus"]).plugin_manager.get_plugin("prometheus") is None
