"""A handler's return value is the job's result: stored as JSON with the completion, read back
by `get_job` and `wait`; one that is too large or not JSON fails that attempt, and nothing is
stored."""

from __future__ import annotations

import asyncio
import json

import pytest

import sqla_queue as sq

FAST = {"poll_interval": 0.05, "concurrency": 2}
RESULTS = [
    {"rows": 3, "files": ["a.csv", "b.csv"], "ok": True, "nested": {"none": None}},
    [1, "two", 3.5, None],
    "done",
    42,
    2.5,
    0,
    False,
    "",
]


@pytest.fixture(params=["sync", "async"])
def kind(request) -> str:
    return request.param


def returning(kind: str, value):
    if kind == "sync":
        return lambda payload, ctx: value

    async def handler(payload, ctx):
        await asyncio.sleep(0)
        return value

    return handler


@pytest.mark.parametrize("value", RESULTS, ids=[type(v).__name__ + repr(v)[:12] for v in RESULTS])
def test_a_returned_value_is_stored_and_returned_by_wait(queue, kind, value, job_row):
    queue.task(name="make")(returning(kind, value))
    job_id = queue.enqueue("make", {})

    summary = queue.worker(**FAST).run(until_empty=True)

    job = queue.wait(job_id, timeout=30)
    assert (summary.completed, job.status, job.result) == (1, sq.JobStatus.COMPLETED, value)
    assert type(job.result) is type(value)
    assert queue.get_job(job_id).result == value
    assert job_row(job_id)["result"] == value  # JSON in the row, as it went in


def test_none_stores_no_result(queue, kind, job_row):
    queue.task(name="nothing")(returning(kind, None))
    job_id = queue.enqueue("nothing", {})
    queue.worker(**FAST).run(until_empty=True)

    assert queue.wait(job_id, timeout=30).status == sq.JobStatus.COMPLETED
    assert job_row(job_id)["result"] is None


def test_results_of_a_batch_each_go_to_their_own_job(queue):
    queue.task(name="square")(lambda payload, ctx: payload["n"] ** 2)
    ids = queue.enqueue_many([{"task": "square", "payload": {"n": n}} for n in range(40)])

    queue.worker(concurrency=8, poll_interval=0.05).run(until_empty=True)

    assert [queue.wait(job_id, timeout=30).result for job_id in ids] == [n * n for n in range(40)]


def test_a_result_over_the_limit_fails_the_attempt_and_stores_nothing(engine, clean_jobs, kind, job_row):
    queue = sq.Queue(engine, load_entrypoints=False, max_result_bytes=100)
    too_big = {"text": "x" * 200}
    queue.task(name="big", max_attempts=1)(returning(kind, too_big))
    job_id = queue.enqueue("big", {})

    summary = queue.worker(**FAST).run(until_empty=True)

    job = queue.wait(job_id, timeout=30)
    assert (summary.failed, job.status, job.result) == (1, sq.JobStatus.FAILED, None)
    assert job_row(job_id)["result"] is None
    size = len(json.dumps(too_big, separators=(",", ":")))
    assert job.last_error == (f"ResultError: the return value of task 'big' is {size} bytes of JSON; the "
                              "limit is 100 (max_result_bytes): store large results elsewhere and return a reference")


def test_the_default_limit_is_64_kib(queue, job_row):
    assert queue.max_result_bytes == 65536
    queue.task(name="big", max_attempts=1)(lambda payload, ctx: "x" * 70_000)
    queue.task(name="fits", max_attempts=1)(lambda payload, ctx: "x" * 60_000)
    big, fits = queue.enqueue("big", {}), queue.enqueue("fits", {})

    queue.worker(**FAST).run(until_empty=True)

    assert queue.get_job(big).status == sq.JobStatus.FAILED
    assert "the limit is 65,536 (max_result_bytes)" in queue.get_job(big).last_error
    assert queue.get_job(fits).result == "x" * 60_000


@pytest.mark.parametrize("value", [{1, 2}, {"when": object()}, float("nan")], ids=["set", "object", "nan"])
def test_a_result_that_is_not_json_fails_the_attempt(queue, kind, value, job_row):
    queue.task(name="odd", max_attempts=1)(returning(kind, value))
    job_id = queue.enqueue("odd", {})

    queue.worker(**FAST).run(until_empty=True)

    job = queue.get_job(job_id)
    assert (job.status, job.result, job_row(job_id)["result"]) == (sq.JobStatus.FAILED, None, None)
    assert job.last_error.startswith("ResultError: the return value of task 'odd' cannot be stored as JSON: ")


def test_a_failed_attempt_keeps_no_result_and_a_later_success_stores_it(queue):
    def flaky(payload, ctx):
        if ctx.attempt == 1:
            raise ConnectionError("upstream down")
        return {"attempt": ctx.attempt}

    queue.task(name="flaky", max_attempts=3, retry_delay=0)(flaky)
    job_id = queue.enqueue("flaky", {})

    queue.worker(**FAST).run(until_empty=True)

    job = queue.wait(job_id, timeout=30)
    assert (job.status, job.attempts, job.result) == (sq.JobStatus.COMPLETED, 2, {"attempt": 2})


@pytest.mark.parametrize("bad", [0, -1, "64k", True, 1.5])
def test_max_result_bytes_must_be_a_positive_integer(engine, bad):
    with pytest.raises(sq.ConfigurationError, match="max_result_bytes"):
        sq.Queue(engine, load_entrypoints=False, max_result_bytes=bad)


def test_complete_refuses_a_result_with_no_json_form_naming_the_job_and_writes_nothing(committed_queue):
    job_id = committed_queue.enqueue("send_email", {})
    (job,) = committed_queue.claim(worker_id="w")
    with pytest.raises(sq.ResultError, match=f"the return value of job {job_id} cannot be stored as JSON"):
        committed_queue.complete(job.id, job.claim_token, result={"tags": {"a", "b"}})
    assert committed_queue.get_job(job_id).status is sq.JobStatus.RUNNING
