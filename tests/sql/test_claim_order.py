"""The claim order is a `ClaimOrder` chosen per Queue: the claim, the worker's claim loop,
`drain` and doctor's EXPLAIN all follow the one in use. `FifoOrder` below is a second
implementation (due time only, no keyset position): each test fails if a runner still used
the hard-wired priority order."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import create_engine, text

import sqla_queue as sq
from sqla_queue.ops.doctor import Doctor, Verdict
from sqla_queue.sql.claim import DEFAULT_ORDER, ClaimOrder, PriorityOrder
from sqla_queue.testing import drain


@dataclass(frozen=True)
class FifoOrder:
    """Oldest due first, whatever the priority."""

    name: str = "fifo"

    def order_by(self, table):
        return [table.c.run_at, table.c.id]

    def index_name(self, table):
        return f"{table.name}_fifo_idx"

    def resumes(self):
        return False

    def position_conditions(self, table):
        return []

    def position(self, jobs):
        return None

    def position_params(self, position):
        return {}


FIFO_INDEX = ("CREATE INDEX sqla_queue_jobs_fifo_idx ON sqla_queue_jobs (queue_name, run_at, id) "
              "WHERE status = 'pending'")


@pytest.fixture
def fresh(create_database):
    engine = create_engine(create_database())
    yield engine
    engine.dispose()


def _enqueue_two(queue: sq.Queue, keys: tuple = (None, None)) -> tuple[int, int]:
    """An old low-priority job and a newer high-priority one, both due (with group `keys`)."""
    now = datetime.now(timezone.utc)
    old = queue.enqueue("work", {"n": "old"}, run_at=now - timedelta(minutes=10), priority=0, group_key=keys[0])
    urgent = queue.enqueue("work", {"n": "urgent"}, run_at=now - timedelta(minutes=1), priority=10, group_key=keys[1])
    return old, urgent


def _queue(engine, order: ClaimOrder, ran: list) -> sq.Queue:
    queue = sq.Queue(engine, load_entrypoints=False, claim_order=order)

    @queue.task
    def work(payload, ctx):
        ran.append(payload["n"])

    return queue


def test_today_s_order_is_the_default_implementation():
    assert isinstance(DEFAULT_ORDER, PriorityOrder) and isinstance(DEFAULT_ORDER, ClaimOrder)
    assert isinstance(FifoOrder(), ClaimOrder)


@pytest.mark.parametrize(("order", "first"), [(DEFAULT_ORDER, "urgent"), (FifoOrder(), "old")])
def test_queue_claim_follows_the_queues_order(fresh, order, first):
    ran: list = []
    queue = _queue(fresh, order, ran)
    _enqueue_two(queue)
    [job] = queue.claim("default", worker_id="w", limit=1)
    assert job.payload["n"] == first


@pytest.mark.parametrize("limits", [{"concurrency": 5}, {"group_concurrency": 1}, {"fair": True}])
@pytest.mark.parametrize(("order", "first"), [(DEFAULT_ORDER, "urgent"), (FifoOrder(), "old")])
def test_a_limited_queue_claims_in_the_queues_order(fresh, order, first, limits):
    ran: list = []
    queue = _queue(fresh, order, ran)
    queue.set_limits("default", **limits)
    # In a fair queue one key's jobs take turns in enqueue order; the claim order decides
    # between the jobs of one turn, here the first job of each of two keys.
    _enqueue_two(queue, ("a", "b") if limits.get("fair") else (None, None))
    [job] = queue.claim("default", worker_id="w", limit=1)
    assert job.payload["n"] == first


@pytest.mark.parametrize(("order", "sequence"), [(DEFAULT_ORDER, ["urgent", "old"]), (FifoOrder(), ["old", "urgent"])])
def test_the_worker_and_drain_run_in_the_queues_order(fresh, order, sequence):
    ran: list = []
    queue = _queue(fresh, order, ran)
    _enqueue_two(queue)
    queue.worker(concurrency=1, batch_size=1, poll_interval=0.05).run(until_empty=True)
    assert ran == sequence
    ran.clear()
    _enqueue_two(queue)
    drain(queue)
    assert ran == sequence


def test_doctor_explains_the_claim_in_use_and_names_its_index(fresh):
    queue = _queue(fresh, FifoOrder(), [])
    check = Doctor(queue).check_claim_plan
    with queue.engine.begin() as conn:
        missing = check(conn)
    assert missing.verdict is Verdict.FAIL and "sqla_queue_jobs_fifo_idx" in missing.summary
    with fresh.begin() as conn:
        conn.execute(text(FIFO_INDEX))
    with queue.engine.begin() as conn:
        found = check(conn)
    assert found.verdict is Verdict.OK and "sqla_queue_jobs_fifo_idx" in found.summary


def test_something_else_is_refused_with_a_clear_message(fresh):
    with pytest.raises(sq.ConfigurationError, match="claim_order must be a sqla_queue.sql.claim.ClaimOrder"):
        sq.Queue(fresh, load_entrypoints=False, claim_order="fifo")


def test_only_an_order_that_reads_both_sides_of_its_position_keeps_it_on_a_dry_queue():
    """The worker keeps a position when a claim comes up short only if that claim read what lies
    before and after the position's reach; an order with one side (or none) starts over."""
    from sqla_queue.sql.claim import position_reads, reads_around_position

    @dataclass(frozen=True)
    class LowerOnly(PriorityOrder):
        before_position_conditions = None

    assert reads_around_position(DEFAULT_ORDER)
    assert list(position_reads(DEFAULT_ORDER, sq.Job.__table__)) == [
        "before_position", "from_position", "after_position"]
    assert not reads_around_position(FifoOrder())
    assert list(position_reads(FifoOrder(), sq.Job.__table__)) == ["from_position"]
    assert list(position_reads(LowerOnly(), sq.Job.__table__)) == ["from_position", "after_position"]
    assert not reads_around_position(LowerOnly())
