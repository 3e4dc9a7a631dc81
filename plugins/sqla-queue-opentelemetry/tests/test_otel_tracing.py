"""Traces in one process, through the entry point: context in meta at every kind of enqueue, a
``send`` span per enqueue, a ``process`` span per attempt (child of ``send`` first, linked on
retries), the handler inside it, errors with status."""

from __future__ import annotations

import asyncio
import importlib.metadata
import uuid
from datetime import timedelta

import pytest
from opentelemetry import baggage, context, trace
from opentelemetry.trace import SpanKind, StatusCode
from sqla_queue_opentelemetry import OpenTelemetry, plugin
from sqlalchemy.orm import Session

import sqla_queue as sq
from sqla_queue.plugins.manager import describe_plugins
from sqla_queue.testing import drain

tracer = trace.get_tracer("tests")


@pytest.fixture
def queue(database_url):
    """Enabled by its entry-point name, as an application does; serves both faces."""
    q = sq.Queue(database_url, plugins=["opentelemetry"])
    yield q
    q.engine.dispose()


@pytest.fixture
def name() -> str:
    return f"otel-{uuid.uuid4().hex[:8]}"


def by_name(spans, prefix):
    return [s for s in spans.get_finished_spans() if s.name.startswith(prefix)]


def test_registers_through_the_entry_point_only_when_enabled_by_name(engine, database_url):
    (entry_point,) = importlib.metadata.entry_points(group="sqla_queue", name="opentelemetry")
    assert entry_point.load() is plugin
    assert isinstance(plugin, OpenTelemetry)
    installed = sq.Queue(engine)
    assert installed.plugin_manager.get_plugin("opentelemetry") is None  # it wraps handlers: opt-in
    (info,) = [i for i in describe_plugins(installed.plugin_manager) if i.name == "opentelemetry"]
    assert (info.source, info.status, info.strategy) == ("entry point", "available", True)
    assert info.distribution.startswith("sqla-queue-opentelemetry ")
    enabled = sq.Queue(engine, plugins=["opentelemetry"])
    assert enabled.plugin_manager.get_plugin("opentelemetry") is plugin
    (info,) = [i for i in describe_plugins(enabled.plugin_manager) if i.name == "opentelemetry"]
    assert (info.status, info.enabled_by) == ("enabled", "plugins=")


def test_an_enqueue_writes_its_send_span_into_the_job_and_ends_it_with_the_job_id(queue, name, spans):
    task = queue.task(name="ship", queue=name)(lambda payload, ctx: None)
    with tracer.start_as_current_span("POST /orders") as request:
        job_id = task.enqueue({"order": 1})
    (send,) = by_name(spans, "send")
    assert send.name == f"send {name}" and send.kind is SpanKind.PRODUCER
    assert send.parent.span_id == request.get_span_context().span_id
    assert send.context.trace_id == request.get_span_context().trace_id
    assert dict(send.attributes) == {
        "messaging.system": "sqla_queue", "messaging.destination.name": name, "messaging.operation.type": "send",
        "messaging.operation.name": "send", "sqla_queue.task": "ship", "messaging.message.id": str(job_id),
        "sqla_queue.job.deduplicated": False,
    }
    meta = queue.get_job(job_id).meta
    assert meta["traceparent"].startswith(f"00-{send.context.trace_id:032x}-{send.context.span_id:016x}-")


def test_each_job_of_enqueue_many_gets_its_own_send_span(queue, name, spans):
    queue.task(name="ship", queue=name)(lambda payload, ctx: None)
    with tracer.start_as_current_span("import"):
        ids = queue.enqueue_many([{"task": "ship", "payload": {"n": n}} for n in range(3)])
    sends = by_name(spans, "send")
    assert sorted(s.attributes["messaging.message.id"] for s in sends) == sorted(map(str, ids))
    parents = {queue.get_job(i).meta["traceparent"].split("-")[2] for i in ids}
    assert parents == {f"{s.context.span_id:016x}" for s in sends} and len(parents) == 3


def test_an_enqueue_in_the_callers_transaction_carries_the_context_and_rolls_back_with_it(queue, engine, name, spans):
    task = queue.task(name="ship", queue=name)(lambda payload, ctx: None)
    with tracer.start_as_current_span("request") as request, Session(engine) as session:
        with session.begin():
            kept = task.enqueue({}, session=session)
        with session.begin():
            dropped = task.enqueue({}, session=session)
            session.rollback()
    assert queue.get_job(dropped) is None
    meta = queue.get_job(kept).meta
    assert meta["traceparent"].split("-")[1] == f"{request.get_span_context().trace_id:032x}"
    assert len(by_name(spans, "send")) == 2


def test_async_enqueues_carry_their_tasks_context_and_baggage(queue, name, spans):
    queue.task(name="ship", queue=name)(lambda payload, ctx: None)

    async def enqueue() -> list[int]:
        token = context.attach(baggage.set_baggage("tenant", "acme"))
        try:
            with tracer.start_as_current_span("async request"):
                one = await queue.enqueue_async("ship", {})
                many = await queue.enqueue_many_async([{"task": "ship", "payload": {"n": n}} for n in range(2)])
        finally:
            context.detach(token)
        return [one, *many]

    ids = asyncio.run(enqueue())
    (request,) = by_name(spans, "async request")
    for job_id in ids:
        meta = queue.get_job(job_id).meta
        assert meta["traceparent"].split("-")[1] == f"{request.context.trace_id:032x}"
        assert meta["baggage"] == "tenant=acme"
    assert len(by_name(spans, "send")) == 3


def test_the_handler_runs_inside_a_process_span_child_of_the_send_span_with_the_baggage(queue, name, spans):
    seen = {}

    @queue.task(name="ship", queue=name)
    def ship(payload, ctx):
        with tracer.start_as_current_span("charge card"):
            seen["tenant"] = baggage.get_baggage("tenant")
        return {"ok": True}

    with tracer.start_as_current_span("request"):
        token = context.attach(baggage.set_baggage("tenant", "acme"))
        job_id = ship.enqueue({})
        context.detach(token)
    (ran,) = drain(queue, queues=[name])
    assert ran.outcome == "completed" and seen == {"tenant": "acme"}
    (send,), (process,), (charge,) = by_name(spans, "send"), by_name(spans, "process"), by_name(spans, "charge")
    assert process.name == f"process {name}" and process.kind is SpanKind.CONSUMER
    assert process.parent.span_id == send.context.span_id
    assert [link.attributes["sqla_queue.link"] for link in process.links] == ["claim"]
    assert charge.parent.span_id == process.context.span_id
    assert {charge.context.trace_id, process.context.trace_id} == {send.context.trace_id}
    assert process.attributes["messaging.message.id"] == str(job_id)
    assert process.attributes["messaging.operation.type"] == "process"
    assert process.attributes["sqla_queue.job.attempt"] == 1
    assert process.attributes["sqla_queue.job.outcome"] == "success"
    assert process.status.status_code is StatusCode.UNSET


def test_retries_start_new_traces_linked_to_the_send_span_and_errors_are_recorded(queue, name, spans):
    @queue.task(name="flaky", queue=name, max_attempts=3, retry_delay=timedelta(0))
    def flaky(payload, ctx):
        if ctx.attempt < 3:
            raise ConnectionError("upstream said no to card 4242")

    with tracer.start_as_current_span("request"):
        flaky.enqueue({})
    assert [r.outcome for r in drain(queue, queues=[name])] == ["retried", "retried", "completed"]
    (send,) = by_name(spans, "send")
    first, second, third = sorted(by_name(spans, "process"), key=lambda s: s.attributes["sqla_queue.job.attempt"])
    assert first.parent.span_id == send.context.span_id and first.context.trace_id == send.context.trace_id
    claims = by_name(spans, "claim")
    for retry in (second, third):
        assert retry.parent is None and retry.context.trace_id != send.context.trace_id
        (link,) = [link for link in retry.links if link.attributes["sqla_queue.link"] == "enqueue"]
        assert (link.context.trace_id, link.context.span_id) == (send.context.trace_id, send.context.span_id)
    for process in (first, second, third):  # each attempt links the batch that claimed it
        (claim,) = [link for link in process.links if link.attributes["sqla_queue.link"] == "claim"]
        assert claim.context.span_id in {c.context.span_id for c in claims}
    assert second.context.trace_id != third.context.trace_id
    for failed in (first, second):
        assert failed.status.status_code is StatusCode.ERROR and failed.status.description == "ConnectionError"
        assert failed.attributes["error.type"] == "ConnectionError"
        (event,) = failed.events
        assert event.attributes["exception.type"] == "ConnectionError"
        assert "4242" not in str(dict(event.attributes))  # messages stay out unless asked for
    assert third.attributes["sqla_queue.job.outcome"] == "success"


def test_exception_messages_are_recorded_only_when_asked(engine, name):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    own = OpenTelemetry(tracer_provider=provider, record_exception_messages=True)
    queue = sq.Queue(engine, plugins=[own], load_entrypoints=False)
    queue.task(name="boom", queue=name, max_attempts=1)(lambda payload, ctx: 1 / 0)
    queue.enqueue("boom", {})
    (ran,) = drain(queue, queues=[name])
    assert ran.outcome == "failed"
    (process,) = [s for s in exporter.get_finished_spans() if s.name.startswith("process")]
    (event,) = process.events
    assert event.attributes["exception.message"] == "division by zero"
    assert "exception.stacktrace" in event.attributes


def test_an_async_handler_and_its_own_spans_run_inside_the_process_span(queue, name, spans):
    @queue.task(name="ship_async", queue=name)
    async def ship_async(payload, ctx):
        await asyncio.sleep(0)
        with tracer.start_as_current_span("async work"):
            await asyncio.sleep(0)
        if payload.get("snooze"):
            raise sq.Snooze(timedelta(days=1))

    with tracer.start_as_current_span("request"):
        ship_async.enqueue({})
        ship_async.enqueue({"snooze": True})
    assert sorted(r.outcome for r in drain(queue, queues=[name])) == ["completed", "snoozed"]
    processes = by_name(spans, "process")
    assert sorted(p.attributes["sqla_queue.job.outcome"] for p in processes) == ["snoozed", "success"]
    for work in by_name(spans, "async work"):
        assert work.parent.span_id in {p.context.span_id for p in processes}
    assert all(p.status.status_code is StatusCode.UNSET for p in processes)


def test_a_job_enqueued_outside_any_trace_gets_a_root_send_span_and_a_child_process_span(queue, name, spans):
    queue.task(name="ship", queue=name)(lambda payload, ctx: None)
    queue.enqueue("ship", {})
    drain(queue, queues=[name])
    (send,), (process,) = by_name(spans, "send"), by_name(spans, "process")
    assert send.parent is None and process.parent.span_id == send.context.span_id


def test_a_job_without_trace_context_gets_a_root_process_span(engine, name, spans):
    plain = sq.Queue(engine, load_entrypoints=False)
    plain.task(name="ship", queue=name)(lambda payload, ctx: None)
    plain.enqueue("ship", {})
    traced = sq.Queue(engine, plugins=["opentelemetry"])
    traced.task(name="ship", queue=name)(lambda payload, ctx: None)
    drain(traced, queues=[name])
    (process,) = by_name(spans, "process")
    assert process.parent is None
    assert [link.attributes["sqla_queue.link"] for link in process.links] == ["claim"]
