"""Priorities: higher runs first, within a priority the claim order stays ``run_at, id``.

On committed data (claims commit on their own). The bound on how long a higher-priority job
waits while a worker drains a lower-priority backlog from a claim position is measured with a
real worker at the end.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

import sqla_queue as sq
from sqla_queue.worker import claim_loop, worker as worker_module


def claim_all(queue, name="default", limit=1) -> list:
    """Every due job of `name`, claimed `limit` at a time, in the order the claims returned them."""
    claimed = []
    while batch := queue.claim(name, worker_id="w", limit=limit):
        claimed += batch
    return claimed


# -- claim order -----------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [1, 4])
def test_interleaved_priorities_are_claimed_highest_first(queue, limit):
    priorities = [0, 5, -1] * 4
    ids = [queue.enqueue("send_email", {"n": n}, priority=p) for n, p in enumerate(priorities)]

    claimed = claim_all(queue, limit=limit)

    expected = [i for _, i in sorted(zip(priorities, ids), key=lambda pair: (-pair[0], pair[1]))]
    assert [job.id for job in claimed] == expected
    assert [job.priority for job in claimed] == [5] * 4 + [0] * 4 + [-1] * 4


def test_within_a_priority_the_claim_order_stays_run_at_then_id(queue):
    now = datetime.now(timezone.utc)
    earlier, same = now - timedelta(minutes=10), now - timedelta(minutes=5)
    late = queue.enqueue("send_email", {}, priority=1, run_at=same)
    tie_a, tie_b = queue.enqueue_many([{"task": "send_email", "payload": {}, "priority": 1, "run_at": same}] * 2)
    first = queue.enqueue("send_email", {}, priority=1, run_at=earlier)
    low_but_oldest = queue.enqueue("send_email", {}, priority=0, run_at=now - timedelta(days=1))

    claimed = claim_all(queue)

    assert [job.id for job in claimed] == [first, late, tie_a, tie_b, low_but_oldest]


def test_a_higher_priority_job_that_is_not_due_yet_blocks_nothing(queue, make_due):
    later = queue.enqueue("send_email", {}, priority=5, delay=timedelta(hours=1))
    now_low = queue.enqueue("send_email", {}, priority=-1)
    waiting_low = queue.enqueue("send_email", {}, priority=-1)

    [first] = queue.claim(worker_id="w")
    make_due(later)
    [second] = queue.claim(worker_id="w")

    assert (first.id, second.id) == (now_low, later)
    assert [job.id for job in claim_all(queue)] == [waiting_low]


def test_a_retried_job_keeps_its_priority_and_goes_first_once_due_again(queue, make_due, job_row):
    urgent = queue.enqueue("send_email", {}, priority=5)
    normal = queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(3)])
    [job] = queue.claim(worker_id="w")
    assert job.id == urgent

    assert queue.retry(job.id, job.claim_token, error="flaky partner", delay=timedelta(hours=1)) is not None
    [while_backing_off] = queue.claim(worker_id="w")
    make_due(urgent)
    [once_due] = queue.claim(worker_id="w")

    assert while_backing_off.id == normal[0]
    assert (once_due.id, once_due.priority, once_due.attempts) == (urgent, 5, 2)
    assert job_row(urgent)["priority"] == 5


# -- enqueue(priority=...) and @queue.task(priority=...) ----------------------------------------


@pytest.mark.parametrize("priority", [-32768, -1, 0, 1, 32767])
def test_every_smallint_priority_is_accepted_and_stored(queue, job_row, priority):
    job_id = queue.enqueue("send_email", {}, priority=priority)
    assert job_row(job_id)["priority"] == priority
    assert queue.get_job(job_id).priority == priority


BAD_PRIORITIES = [32768, -32769, 2**63, True, False, 1.0, 1.5, "5", b"5"]


@pytest.mark.parametrize("priority", BAD_PRIORITIES, ids=repr)
def test_a_bad_priority_is_refused_and_nothing_is_written(queue, count_jobs, priority):
    with pytest.raises(sq.InvalidInputError, match="priority"):
        queue.enqueue("send_email", {}, priority=priority)
    with pytest.raises(sq.InvalidInputError, match="priority"):
        queue.enqueue_many([{"task": "send_email", "payload": {}},
                            {"task": "send_email", "payload": {}, "priority": priority}])
    assert count_jobs() == 0


def test_the_refusal_names_the_range(queue):
    with pytest.raises(sq.InvalidInputError, match="-32768.*32767"):
        queue.enqueue("send_email", {}, priority=40_000)


def test_a_tasks_default_priority_is_used_and_enqueues_own_wins(queue, job_row):
    @queue.task(priority=3)
    def report(payload, ctx):  # pragma: no cover - never run
        return None

    by_default = queue.enqueue("report", {})
    given = queue.enqueue(report, {}, priority=7)
    zero = queue.enqueue("report", {}, priority=0)  # an explicit 0 is a priority, not "unset"
    many = queue.enqueue_many([{"task": "report", "payload": {}},
                               {"task": "report", "payload": {}, "priority": -2}])
    plain = queue.enqueue("send_email", {})

    stored = [job_row(i)["priority"] for i in (by_default, given, zero, *many, plain)]
    assert stored == [3, 7, 0, 3, -2, 0]


@pytest.mark.parametrize("priority", [32768, True, 2.5, "high"], ids=repr)
def test_a_bad_task_default_priority_is_refused_at_registration(queue, priority):
    with pytest.raises(sq.ConfigurationError, match="priority of task 'bad_default'"):
        queue.task(lambda payload, ctx: None, name="bad_default", priority=priority)
    assert "bad_default" not in queue.task_names


# -- the worker: a higher priority while a lower-priority backlog drains ------------------------


def test_a_claim_from_a_position_takes_higher_priorities_first_and_lower_ones_after(queue):
    """A claim from a position skips what its priority holds before the position, not the other
    priorities: a higher-priority job enqueued after the position is taken first, a
    lower-priority one after the position's priority runs out."""
    queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(4)])
    first = queue.claim(worker_id="w", limit=2)
    position = worker_module.claim_position(first)
    urgent = queue.enqueue("send_email", {}, priority=5)
    later = queue.enqueue("send_email", {}, priority=-1)

    taken = []
    for _ in range(4):
        _, jobs = queue.complete_and_claim([], worker_id="w", limit=1, from_position=position)
        taken.extend(jobs)

    assert [(job.id, job.priority) for job in taken] == [
        (urgent, 5), *((job_id, 0) for job_id in sorted(set(range(1, 5)) - {j.id for j in first})), (later, -1)]


def test_a_higher_priority_job_runs_at_the_workers_next_claim_while_a_backlog_drains(queue, count_jobs):
    """A worker draining a priority-0 backlog claims from its position; a priority-5 job
    enqueued meanwhile is taken by its next claims, from the position or from the start of the
    claim order, not after the backlog. The worker's claims are recorded (position or none,
    jobs, when each began and returned) to show that no claim which began after the enqueue
    committed came back without it while there was room."""
    urgent_started = threading.Event()

    @queue.task
    def work(payload, ctx):
        if payload.get("urgent"):
            urgent_started.set()
        else:
            time.sleep(0.002)

    backlog = 20_000
    queue.enqueue_many([{"task": "work", "payload": {"n": n}} for n in range(backlog)])
    worker = queue.worker(concurrency=4, batch_size=4, poll_interval=0.05, lease=timedelta(seconds=6))
    claims = _record_claims(worker)
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        assert _wait_for(lambda: any(position for position, _, _, _ in claims))  # draining from a position
        urgent = queue.enqueue("work", {"urgent": True}, priority=5)
        enqueued_at = time.monotonic()
        ran = urgent_started.wait(5)
        left = count_jobs("status = 'pending'")
    finally:
        worker.stop()
        runner.join(15)
    assert ran and not runner.is_alive()
    assert left > backlog // 2, "the backlog ran out: that, not the claim order, let the urgent job in"
    [taking] = [claim for claim in list(claims) if urgent in claim[1]]
    missed = [claim for claim in list(claims) if enqueued_at < claim[2] and claim[3] < taking[3] and claim[1]]
    assert missed == [], "a claim that began after the enqueue took other jobs before the urgent one"


def _record_claims(worker) -> list[tuple]:
    """Every claim of `worker` as ``(from_position, claimed ids, monotonic time it began, time it
    returned)``."""
    claims: list[tuple] = []
    outcomes = worker.core.outcomes
    real = outcomes.complete_and_claim

    def recorded(finished, queues, worker_id, limit, positions, results, lease, tasks):
        began = time.monotonic()
        results, jobs = real(finished, queues, worker_id, limit, positions, results, lease, tasks)
        if limit:
            claims.append((positions.get("default"), {job.id for job in jobs}, began, time.monotonic()))
        return results, jobs

    outcomes.complete_and_claim = recorded
    return claims


def _wait_for(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()
