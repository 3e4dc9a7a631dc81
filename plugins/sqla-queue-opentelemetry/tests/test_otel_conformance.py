"""sqla_queue.testing's conformance checks, on the entry point's instance: its meta hook, its
run middleware and its lifecycle hooks each keep their contract."""

from __future__ import annotations

from sqla_queue_opentelemetry import plugin

from sqla_queue.hookspecs import LIFECYCLE_HOOKS
from sqla_queue.testing import check_lifecycle_plugin, check_meta_plugin, check_run_middleware


def test_its_meta_hook_conforms_and_writes_a_trace_context_for_every_job(engine, spans):
    report = check_meta_plugin(plugin, engine)
    assert all(answer and "traceparent" in answer for answer in report.answers)
    stored = [meta for metas in report.stored.values() for meta in metas]
    assert len({meta["traceparent"] for meta in stored}) == len(stored) == 5  # each job its own
    assert report.loads_on_install is False  # it changes what is stored: enabled by name


def test_its_run_middleware_conforms_and_opens_a_process_span_per_attempt(engine, spans):
    report = check_run_middleware(plugin, engine)
    attempts = sum(len(outcomes) for outcomes in report.outcomes.values())
    assert len([s for s in spans.get_finished_spans() if s.name.startswith("process")]) == attempts == 10
    assert report.loads_on_install is False


def test_its_lifecycle_hooks_conform(engine):
    report = check_lifecycle_plugin(plugin, engine)
    assert set(report.hooks) == set(LIFECYCLE_HOOKS)  # every event: metrics, span ends, batch spans
    assert report.loads_on_install is False
