"""`sqla_queue.testing.enqueued`: the pending jobs that match, and a repr that explains a
failed ``assert``."""

from __future__ import annotations

from datetime import timedelta

import pytest

import sqla_queue as sq
from sqla_queue.testing import Enqueued, enqueued


def test_matches_by_task_payload_subset_and_queue(queue):
    first = queue.enqueue("send_receipt", {"order_id": 1, "customer": {"id": 7, "tier": "gold"}})
    second = queue.enqueue("send_receipt", {"order_id": 2, "customer": {"id": 8}}, queue="urgent")
    resize = queue.enqueue("resize", {"order_id": 1})

    assert [job.id for job in enqueued(queue)] == [first, second, resize]
    assert [job.id for job in enqueued(queue, "send_receipt")] == [first, second]
    assert [job.id for job in enqueued(queue, queue.get_task("send_receipt"))] == [first, second]
    assert [job.id for job in enqueued(queue, payload={"order_id": 1})] == [first, resize]
    assert [job.id for job in enqueued(queue, payload={"customer": {"tier": "gold"}})] == [first]
    assert [job.id for job in enqueued(queue, "send_receipt", queue_name="urgent")] == [second]
    assert enqueued(queue, "send_receipt", payload={"order_id": 3}) == []
    [job] = enqueued(queue, "resize")
    assert isinstance(job, sq.JobView) and job.payload == {"order_id": 1} and job.queue == "images"


def test_a_task_is_named_by_its_handler_too(queue):
    queue.enqueue("resize", {"n": 1})
    handler = queue.get_task("resize").handler
    assert len(enqueued(queue, handler)) == 1


def test_only_pending_jobs_count(queue):
    done = queue.enqueue("send_receipt", {"order_id": 1})
    [job] = queue.claim("mail", worker_id="w")
    assert job.id == done and enqueued(queue, "send_receipt") == []  # running
    queue.complete(job.id, job.claim_token)
    assert enqueued(queue, "send_receipt") == []  # completed
    later = queue.enqueue("send_receipt", {"order_id": 2}, delay=timedelta(hours=1))
    assert [j.id for j in enqueued(queue, "send_receipt")] == [later]  # pending, not due yet


def test_a_failed_assert_says_what_was_searched_and_what_is_pending_instead(queue):
    queue.enqueue("send_receipt", {"order_id": 1})
    queue.enqueue("resize", {"image": "a.png"}, delay=timedelta(minutes=90))

    found = enqueued(queue, "send_receipt", payload={"order_id": 2}, queue_name="mail")
    assert isinstance(found, Enqueued) and not found
    text = repr(found)
    assert text.startswith("<no pending job of task 'send_receipt' in queue 'mail' "
                           'with payload containing {"order_id": 2}; pending instead (2): ')
    assert "#1 send_receipt {\"order_id\": 1} in 'mail'; " in text
    assert "#2 resize {\"image\": \"a.png\"} in 'images', due in 1:29:5" in text

    with pytest.raises(AssertionError) as failed:
        assert enqueued(queue, "send_receipt", payload={"order_id": 2})
    assert "pending instead (2): #1 send_receipt" in str(failed.value)


def test_the_repr_of_matches_and_of_an_empty_table(queue):
    assert repr(enqueued(queue, "resize")) == "<no pending job of task 'resize'; no job is pending at all>"
    for n in range(12):
        queue.enqueue("resize", {"n": n})
    text = repr(enqueued(queue, "resize"))
    assert text.startswith("<12 pending jobs of task 'resize': #1 resize") and text.endswith("; and 2 more>")
    assert repr(enqueued(queue, payload={"n": 3})).startswith("<1 pending job of any task with payload")
    [job] = queue.claim("images", worker_id="w")
    queue.retry(job.id, job.claim_token, error="boom", delay=60)
    assert "#1 resize {\"n\": 0} in 'images', due in 0:5" in repr(enqueued(queue, payload={"n": 0}))
    assert "1 of 2 attempts made>" in repr(enqueued(queue, payload={"n": 0}))


@pytest.mark.parametrize(("args", "kwargs", "error", "message"), [
    (("no_such_task",), {}, sq.UnknownTaskError, "no_such_task"),
    ((), {"payload": [1, 2]}, sq.InvalidInputError, "payload must be a mapping"),
    ((), {"payload": "order_id"}, sq.InvalidInputError, "got str"),
    ((), {"payload": {"at": object()}}, sq.InvalidInputError, "cannot be compared as JSON"),
    ((), {"payload": {"x": float("nan")}}, sq.InvalidInputError, "cannot be compared as JSON"),
    ((), {"queue_name": ""}, sq.InvalidInputError, "queue_name must be"),
    ((), {"queue_name": 3}, sq.InvalidInputError, "queue_name must be"),
])
def test_bad_inputs_are_refused_clearly(queue, args, kwargs, error, message):
    with pytest.raises(error, match=message):
        enqueued(queue, *args, **kwargs)


def test_reachable_as_sq_testing(queue):
    queue.enqueue("send_receipt", {"order_id": 1})
    assert sq.testing.enqueued(queue, "send_receipt")
