"""The lease keeper (`sqla_queue.services.lease_keeper`), one pass at a time against the database:
renewal restarts leases, a claim taken meanwhile is lost, a renewal that fails gives up only
the jobs whose lease may have run out, and a handler past its timeout is settled."""

from __future__ import annotations

import dataclasses

import time
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

import sqla_queue as sq
from sqla_queue.worker.held_job import HeldJob
from sqla_queue.services.lease_keeper import LeaseKeeper, LeaseKeeperConfig, LeaseKeeperResult
from sqla_queue.errors import ConfigurationError


class LostClaims:
    def __init__(self) -> None:
        self.events: list = []

    @sq.hookimpl
    def sqla_queue_lost_claim(self, event):
        self.events.append(event)


@pytest.fixture
def lost():
    return LostClaims()


@pytest.fixture
def leased(engine, clean_jobs, lost):
    """A queue recording lost claims, and a factory of held jobs claimed on it."""
    queue = sq.Queue(engine, load_entrypoints=False, plugins=[lost])
    queue.task(name="work")(lambda payload, ctx: None)

    def hold(n: int = 1, timeout: timedelta | None = None) -> list[HeldJob]:
        queue.enqueue_many([{"task": "work", "payload": {}} for _ in range(n)])
        task = dataclasses.replace(queue.get_task("work"), timeout=timeout)
        held = [HeldJob(job, task) for job in queue.claim(worker_id="keeper-test", limit=n)]
        for h in held:
            h.start_deadline()  # a handler took it: its timeout counts from now
        return held

    return queue, hold


def keeper_for(queue, held: list[HeldJob]) -> LeaseKeeper:
    return LeaseKeeper(queue.core, LeaseKeeperConfig(lease=timedelta(seconds=60)), lambda: list(held))


def age_leases(engine, by: str = "10 minutes") -> None:
    with engine.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET locked_at = locked_at - CAST(:by AS interval), "
                          "lease_expires_at = lease_expires_at - CAST(:by AS interval)"), {"by": by})


def lease_age(engine, job_id: int) -> timedelta:
    with engine.connect() as conn:
        return conn.execute(text("SELECT clock_timestamp() - locked_at FROM sqla_queue_jobs WHERE id = :id"),
                            {"id": job_id}).scalar_one()


def test_the_config_validates_the_lease_and_derives_the_schedule():
    config = LeaseKeeperConfig(lease=30)
    assert config.lease == timedelta(seconds=30)
    assert config.renew_every == 10.0 and config.tick == 1.0
    assert LeaseKeeperConfig(lease=1.2).tick == pytest.approx(0.1)
    for bad in (0, -1, "60", None):
        with pytest.raises(ConfigurationError, match="lease"):
            LeaseKeeperConfig(lease=bad)


def test_run_once_renews_every_running_lease(leased, engine):
    queue, hold = leased
    held = hold(2)
    age_leases(engine)
    before = time.monotonic()

    result = keeper_for(queue, held).run_once()

    assert {h.job.id for h in result.renewed} == {h.job.id for h in held}
    assert result.lost == result.fenced == result.timed_out == ()
    assert all(lease_age(engine, h.job.id) < timedelta(minutes=1) for h in held)
    assert all(h.lease_confirmed >= before and h.state == HeldJob.RUNNING for h in held)


def test_a_job_whose_handler_finished_is_left_to_the_claim_loop(leased, engine):
    queue, hold = leased
    [held] = hold()
    assert held.move(HeldJob.COMPLETING)
    age_leases(engine)

    result = keeper_for(queue, [held]).run_once()

    assert result.renewed == () and held.state == HeldJob.COMPLETING
    assert lease_age(engine, held.job.id) >= timedelta(minutes=10)


def test_a_claim_taken_meanwhile_is_lost_and_settled(leased, engine, lost):
    queue, hold = leased
    [held] = hold()
    age_leases(engine, "1 hour")
    queue.recover_expired(lease=60)
    queue.claim(worker_id="someone-else")

    result = keeper_for(queue, [held]).run_once()

    assert result.lost == (held,) and result.renewed == () and held.settled
    assert [(e.job_id, e.operation) for e in lost.events] == [(held.job.id, "heartbeat")]


def test_a_handler_past_its_timeout_is_settled_and_not_renewed(leased, engine):
    queue, hold = leased
    [late] = hold(timeout=timedelta(0))
    [on_time] = hold(timeout=timedelta(hours=1))

    result = keeper_for(queue, [late, on_time]).run_once()

    assert result.timed_out == (late,) and late.settled
    assert result.renewed == (on_time,) and on_time.state == HeldJob.RUNNING


def test_a_failed_renewal_fences_only_the_jobs_whose_lease_may_have_expired(leased, database_url, lost):
    queue, hold = leased
    stale, fresh = hold(2)
    stale.lease_confirmed = time.monotonic() - 3600
    nothing_listens = make_url(database_url).set(host="127.0.0.1", port=1, query={})
    unreachable = create_engine(nothing_listens, connect_args={"connect_timeout": 2})
    cut_off = sq.Queue(unreachable, load_entrypoints=False, plugins=[lost])
    try:
        result = keeper_for(cut_off, [stale, fresh]).run_once()
    finally:
        unreachable.dispose()

    assert result.fenced == (stale,) and stale.settled
    assert result.renewed == result.lost == () and fresh.state == HeldJob.RUNNING
    assert lost.events == []  # the keeper decides; the worker reports (Queue.report_fenced)


def test_renewal_waits_for_its_schedule_between_passes(leased, engine):
    queue, hold = leased
    held = hold()
    age_leases(engine)

    result = keeper_for(queue, held).run_if_due()  # a third of a minute has not passed

    assert result.renewed == () and lease_age(engine, held[0].job.id) >= timedelta(minutes=10)


def test_each_beat_renews_then_refreshes_the_registry_even_with_nothing_held(leased):
    queue, hold = leased
    beats: list[str] = []
    keeper = LeaseKeeper(queue.core, LeaseKeeperConfig(lease=timedelta(seconds=60)), lambda: list(held),
                         heartbeat=lambda: beats.append("beat"))
    held: list[HeldJob] = []
    assert keeper.run_once() == LeaseKeeperResult() and beats == ["beat"]
    held.extend(hold())
    assert keeper.run_once().renewed == tuple(held) and beats == ["beat", "beat"]
    assert keeper.run_if_due().renewed == () and beats == ["beat", "beat"]  # not due: no beat either


def test_no_heartbeat_after_a_failed_renewal(leased, database_url):
    """The database did not answer the renewal: a heartbeat waiting out its own deadline too
    would only push the next renewal later."""
    queue, hold = leased
    held = hold()
    nothing_listens = make_url(database_url).set(host="127.0.0.1", port=1, query={})
    unreachable = create_engine(nothing_listens, connect_args={"connect_timeout": 2})
    beats: list[str] = []
    cut_off = sq.Queue(unreachable, load_entrypoints=False)
    try:
        result = LeaseKeeper(cut_off.core, LeaseKeeperConfig(lease=timedelta(seconds=60)), lambda: held,
                             heartbeat=lambda: beats.append("beat")).run_once()
    finally:
        unreachable.dispose()
    assert result.renewal_failed and beats == []
