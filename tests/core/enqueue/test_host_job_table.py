"""A host application's own job table, declared with JobMixin on its own DeclarativeBase."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.orm import DeclarativeBase

import sqla_queue as sq


class HostBase(DeclarativeBase):
    pass


class MyJob(sq.JobMixin, HostBase):
    __tablename__ = "host_jobs"


@pytest.fixture(scope="module")
def host_engine(create_database):
    engine = create_engine(create_database(migrate=False))
    HostBase.metadata.create_all(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def host_queue(host_engine):
    with host_engine.begin() as conn:
        conn.execute(text("TRUNCATE host_jobs RESTART IDENTITY"))
    queue = sq.Queue(host_engine, model=MyJob, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")
    return queue


def test_index_names_derive_from_the_host_table_name(host_engine):
    names = {ix["name"] for ix in inspect(host_engine).get_indexes("host_jobs")}
    assert {
        "host_jobs_pending_claim_idx",
        "host_jobs_active_key_idx",
        "host_jobs_running_unleased_idx",
    } <= names
    assert not any(name.startswith("sqla_queue_jobs") for name in names)


def test_host_model_enqueues_claims_and_completes_in_its_own_table(host_queue, host_engine):
    job_id = host_queue.enqueue("send_email", {"to": "a@example.com"}, idempotency_key="k")
    assert host_queue.enqueue("send_email", {}, idempotency_key="k") == job_id

    [job] = host_queue.claim(worker_id="w")
    assert (job.id, job.payload) == (job_id, {"to": "a@example.com"})
    assert host_queue.complete(job.id, job.claim_token) is True

    with host_engine.connect() as conn:
        status = conn.execute(text("SELECT status FROM host_jobs WHERE id = :id"), {"id": job_id})
        assert status.scalar_one() == "completed"
        assert conn.execute(text("SELECT to_regclass('sqla_queue_jobs')")).scalar_one() is None
    assert host_queue.stats()["default"].completed == 1


def test_host_model_recovers_expired_leases(host_queue, host_engine):
    job_id = host_queue.enqueue("send_email", {})
    [stale] = host_queue.claim(worker_id="w")
    with host_engine.begin() as conn:
        conn.execute(text("UPDATE host_jobs SET lease_expires_at = NULL, locked_at = clock_timestamp() - interval '1 hour'"))

    assert host_queue.recover_expired(lease=60) == [job_id]
    assert host_queue.complete(stale.id, stale.claim_token) is False
    assert host_queue.get_job(job_id).last_error == "claim lease expired"
