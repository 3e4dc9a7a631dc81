"""Secrets stay out of last_error, out of DatabaseError text and out of log records."""

from __future__ import annotations

import logging
import traceback
from datetime import timedelta

import pytest
from sqlalchemy import CheckConstraint, create_engine
from sqlalchemy.orm import DeclarativeBase, Session

import sqla_queue as sq

PASSWORD = "hunter2-Sup3rS3cret"
URL_SECRET = "pg-Pa55w0rd"
MARKER = "4111-1111-MARKER-1111"


def _hostile_error_text() -> str:
    """10,000 characters on one line: secrets up front, NUL bytes and control characters throughout."""
    head = f"login failed password={PASSWORD} url=postgresql://app:{URL_SECRET}@db.internal/prod \x00\x07 "
    return head + ("x\x00" * 5_000)[: 10_000 - len(head)]


def _assert_safe(stored: str) -> None:
    assert len(stored) <= 500
    assert "\x00" not in stored and "\x07" not in stored
    assert PASSWORD not in stored
    assert URL_SECRET not in stored
    assert "login failed" in stored  # still useful


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(lambda: RuntimeError(_hostile_error_text()), id="exception"),
        pytest.param(_hostile_error_text, id="string"),
    ],
)
def test_retry_with_a_hostile_error_succeeds_and_stores_a_bounded_clean_message(queue, error):
    job_id = queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w")

    outcome = queue.retry(job.id, job.claim_token, error=error(), delay=60)

    assert outcome is not None and outcome.status is sq.JobStatus.PENDING
    _assert_safe(queue.get_job(job_id).last_error)


def test_fail_with_a_hostile_error_succeeds_and_stores_a_bounded_clean_message(queue):
    job_id = queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w")

    assert queue.fail(job.id, job.claim_token, error=RuntimeError(_hostile_error_text())) is True

    _assert_safe(queue.get_job(job_id).last_error)


class HostBase(DeclarativeBase):
    pass


class GuardedJob(sq.JobMixin, HostBase):
    """A host's job table with one extra rule of its own that only the database enforces."""

    __tablename__ = "guarded_jobs"


GuardedJob.__table__.append_constraint(
    CheckConstraint("NOT (payload ? 'card_number')", name="no_card_numbers")
)


@pytest.fixture(scope="module")
def host_engine(create_database):
    """An engine as a host app creates it: parameters NOT hidden in its error messages."""
    engine = create_engine(create_database(migrate=False))
    assert engine.hide_parameters is False
    HostBase.metadata.create_all(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def guarded_queue(host_engine):
    queue = sq.Queue(host_engine, model=GuardedJob, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="charge")
    return queue


def _assert_no_marker(error: BaseException) -> None:
    assert MARKER not in str(error)
    assert MARKER not in repr(error)
    assert MARKER not in "".join(traceback.format_exception(error))


def test_database_error_through_the_hosts_session_never_shows_the_payload(guarded_queue, host_engine):
    with Session(host_engine) as session:
        with pytest.raises(sq.DatabaseError, match="no_card_numbers") as raised:
            guarded_queue.enqueue("charge", {"card_number": MARKER}, session=session)

    _assert_no_marker(raised.value)
    assert MARKER in str(raised.value.orig)  # the driver error (kept as .orig) did carry it


def test_database_error_through_the_hosts_connection_never_shows_the_payload(
    guarded_queue, host_engine
):
    with host_engine.connect() as conn, pytest.raises(sq.DatabaseError) as raised:
        guarded_queue.enqueue_many([{"task": "charge", "payload": {"card_number": MARKER}}],
                                   connection=conn)

    _assert_no_marker(raised.value)


def test_database_error_in_our_own_transaction_never_shows_the_payload(guarded_queue):
    with pytest.raises(sq.DatabaseError) as raised:
        guarded_queue.enqueue("charge", {"card_number": MARKER})

    _assert_no_marker(raised.value)


def test_log_records_never_contain_payload_values(queue, caplog, expire_lease):
    caplog.set_level(logging.DEBUG, logger="sqla_queue")
    payload = {"to": f"{MARKER}@example.com", "card_number": MARKER}

    ids = queue.enqueue_many([{"task": "send_email", "payload": payload}] * 5)
    queue.enqueue("send_email", payload, idempotency_key="dedupe")
    queue.enqueue("send_email", payload, idempotency_key="dedupe")
    jobs = queue.claim(worker_id="w", limit=5)
    queue.complete(jobs[0].id, jobs[0].claim_token)
    queue.complete(jobs[0].id, jobs[0].claim_token)  # replay
    queue.retry(jobs[1].id, jobs[1].claim_token, error="smtp timeout")
    queue.fail(jobs[2].id, jobs[2].claim_token, error="bad address")
    expire_lease(jobs[3].id)
    queue.recover_expired(lease=timedelta(minutes=1))
    queue.complete(jobs[3].id, jobs[3].claim_token)  # lost claim
    queue.claim("empty", worker_id="w")

    records = [r for r in caplog.records if r.name.startswith("sqla_queue")]
    outcomes = {getattr(r, "outcome", None) for r in records}
    assert {"enqueued", "deduplicated", "claimed", "completed", "retried", "failed",
            "recovered:pending", "lost_claim", "empty_claim"} <= outcomes
    assert len(ids) == 5
    for record in records:
        assert MARKER not in record.getMessage()
        assert MARKER not in repr(vars(record))
        assert jobs[0].claim_token not in repr(vars(record))


def test_a_handler_raising_a_megabyte_message_fails_its_job_with_a_bounded_error(engine, clean_jobs):
    """D1: a long exception message once froze the worker while it was sanitised (quadratic)."""
    from sqla_queue.testing import drain

    queue = sq.Queue(engine, load_entrypoints=False)

    @queue.task(max_attempts=1)
    def shout(payload, ctx):
        raise RuntimeError("x" * 2_000_000)

    job_id = queue.enqueue(shout, {})
    assert [r.outcome for r in drain(queue)] == ["failed"]
    job = queue.get_job(job_id)
    assert job.last_error.startswith("RuntimeError: xxx") and len(job.last_error) <= 500
    assert len(job.last_traceback) <= 4000
