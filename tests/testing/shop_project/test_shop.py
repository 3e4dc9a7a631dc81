"""The shop's tests, with sqla_queue's pytest plugin and no conftest.py."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import sqla_queue as sq
from shop import Shop


@pytest.fixture
def shop(sqla_queue_database_url):
    shop = Shop(sqla_queue_database_url)
    yield shop
    shop.engine.dispose()


def test_each_test_has_a_fresh_database(shop):
    assert sq.testing.enqueued(shop.queue) == []
    shop.place_order("a@example.com")


def test_and_this_one_too(shop):
    assert sq.testing.enqueued(shop.queue) == []


def test_placing_an_order_enqueues_a_receipt(shop):
    order_id = shop.place_order("ann@example.com")
    assert sq.testing.enqueued(shop.queue, "send_receipt", payload={"order_id": order_id})
    assert len(sq.testing.enqueued(shop.queue, queue_name="mail")) == 1


def test_the_receipt_handler_marks_the_order_mailed(shop):
    order_id = shop.place_order("ann@example.com")
    ran = sq.testing.drain(shop.queue)
    assert [(r.job.task, r.outcome) for r in ran] == [("send_receipt", "completed")]
    assert shop.order(order_id).mailed and shop.outbox == ["ann@example.com"]
    assert [j.task for j in sq.testing.enqueued(shop.queue)] == ["remind"]  # due tomorrow


def test_time_travel_runs_the_reminders_due_within_advance(shop):
    order_id = shop.place_order("ann@example.com")
    assert [r.job.task for r in sq.testing.drain(shop.queue, advance=timedelta(days=1))] == [
        "send_receipt", "remind", "remind", "remind"]
    assert shop.order(order_id).reminders == 3
    assert sq.testing.enqueued(shop.queue) == []


def test_one_pass_does_not_run_what_the_jobs_enqueue(shop):
    order_id = shop.place_order("ann@example.com")
    ran = sq.testing.drain(shop.queue, advance=timedelta(days=1), until_empty=False)
    assert sorted(r.job.task for r in ran) == ["remind", "send_receipt"]
    assert shop.order(order_id).reminders == 1


def test_a_failing_receipt_is_retried_after_its_delay(shop):
    shop.place_order("not-an-address")
    ran = sq.testing.drain(shop.queue, queues=["mail"], advance=timedelta(minutes=30))
    assert [r.outcome for r in ran] == ["retried"] * 4 + ["failed"]
    assert str(ran[-1].error) == "cannot mail 'not-an-address'"


def test_run_job_runs_one_handler_with_a_real_context(shop):
    order_id = shop.place_order("bo@example.com")
    ran = sq.testing.run_job(shop.queue, "send_receipt", {"order_id": order_id, "email": "bo@example.com"},
                             attempt=2)
    assert ran.outcome == "completed" and ran.job.attempts == 2 and shop.order(order_id).mailed
    with pytest.raises(ValueError, match="cannot mail 'nobody'"):
        sq.testing.run_job(shop.queue, "send_receipt", {"order_id": order_id, "email": "nobody"})
    with pytest.raises(TypeError, match="'colour'"):
        sq.testing.run_job(shop.queue, "send_receipt", {}, colour="red")


def test_inline_mode_runs_the_receipt_at_commit(sqla_queue_database_url):
    shop = Shop(sqla_queue_database_url, testing="inline")
    try:
        order_id = shop.place_order("cy@example.com")  # the receipt ran at the commit
        assert shop.order(order_id).mailed and shop.outbox == ["cy@example.com"]
        assert shop.order(order_id).reminders == 0  # due tomorrow: left pending
        assert len(sq.testing.drain(shop.queue, advance=timedelta(days=1))) == 3
        with pytest.raises(ValueError, match="cannot mail 'nobody'"):
            shop.place_order("nobody")  # the receipt's failure, raised from the commit
    finally:
        shop.engine.dispose()


def test_drain_async_awaits_async_handlers(shop):
    async def scenario():
        shop.queue.enqueue("audit", {"order_id": 9})
        return await sq.testing.drain_async(shop.queue)

    assert [r.result for r in asyncio.run(scenario())] == [{"audited": 9}]


def test_a_readable_failure(shop):
    """Fails on purpose: the outer test checks what pytest prints."""
    shop.place_order("ann@example.com")
    assert sq.testing.enqueued(shop.queue, "send_receipt", payload={"order_id": 2})
