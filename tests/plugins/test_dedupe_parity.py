"""A dedupe plugin enabled only in the worker (``SQLA_QUEUE_PLUGINS`` set on the worker, not
on the web process) deduplicates nothing, since keys are made at enqueue. The worker, which sees
both sides, says so: one WARNING per task naming the plugin and the fix."""

from __future__ import annotations

import logging

import pytest

import sqla_queue as sq


class ByOrder:
    """A dedupe plugin: one job per order id."""

    @sq.hookimpl
    def sqla_queue_idempotency_key(self, task, payload):
        return f"order:{payload['order']}" if "order" in payload else None


@pytest.fixture
def queues(engine, clean_jobs):
    """(web, worker): the same table; only the worker's Queue has the plugin."""
    def build(*plugins):
        q = sq.Queue(engine, load_entrypoints=False, plugins=plugins)
        q.task(name="ship")(lambda payload, ctx: None)
        return q

    return build(), build(ByOrder())


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "idempotency key" in r.getMessage()]


def test_a_plugin_enabled_only_on_the_worker_is_named_once_per_task(queues, caplog):
    web, worker_queue = queues
    first = web.enqueue("ship", {"order": 7})
    web.enqueue("ship", {"order": 7})  # not deduplicated: the web process has no plugin
    caplog.set_level(logging.WARNING, logger="sqla_queue.plugins")
    worker_queue.worker(concurrency=1).run(until_empty=True)

    [message] = _warnings(caplog)
    assert f"job {first} (task 'ship') was enqueued without the idempotency key" in message
    assert "dedupe plugin" in message and "SQLA_QUEUE_PLUGINS=" in message


def test_no_warning_when_both_sides_have_the_plugin(queues, caplog):
    _, worker_queue = queues
    worker_queue.enqueue("ship", {"order": 7})
    worker_queue.enqueue("ship", {"order": 7})  # deduplicated
    worker_queue.enqueue("ship", {"note": "no order"})  # the plugin gives no key: nothing to say
    caplog.set_level(logging.WARNING, logger="sqla_queue.plugins")
    summary = worker_queue.worker(concurrency=1).run(until_empty=True)
    assert summary.completed == 2
    assert _warnings(caplog) == []
