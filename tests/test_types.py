"""`types.built` makes a worker's per-job frozen dataclasses without their generated
``__init__``: every field must still be given, with the value the constructor would store."""

from __future__ import annotations

import dataclasses
import pickle
from collections import namedtuple
from datetime import datetime, timezone

import pytest

from sqla_queue.types import ClaimedJob, JobContext

Row = namedtuple("Row", "id task payload attempts max_attempts claim_token queue_name idempotency_key "
                        "locked_at run_at priority scheduled_at snoozes meta")
NOW = datetime(2026, 12, 5, tzinfo=timezone.utc)
ROW = Row(7, "send_email", {"to": "a"}, 2, 5, "tok", "mail", "k-1", NOW, NOW, 3, None, 1, {"tenant": "t"})


def by_field(instance) -> dict:
    return {f.name: getattr(instance, f.name) for f in dataclasses.fields(instance)}


def test_a_claimed_job_from_a_row_has_every_field_the_constructor_would_give_it():
    job = ClaimedJob.from_row(ROW)
    expected = ClaimedJob(id=7, task="send_email", payload={"to": "a"}, attempts=2, max_attempts=5,
                          claim_token="tok", queue="mail", idempotency_key="k-1", locked_at=NOW, run_at=NOW,
                          priority=3, scheduled_at=None, snoozes=1, meta={"tenant": "t"})
    assert set(vars(job)) == {f.name for f in dataclasses.fields(ClaimedJob)}
    assert job == expected and by_field(job) == by_field(expected)
    assert pickle.loads(pickle.dumps(job)) == job
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.attempts = 3  # type: ignore[misc]
    assert dataclasses.replace(job, start_after=1.5).start_after == 1.5


def test_a_jobs_context_has_every_field_the_constructor_would_give_it():
    job = ClaimedJob.from_row(ROW._replace(idempotency_key=None))
    ctx = job.context(None, None, is_async=True)
    assert set(vars(ctx)) == {f.name for f in dataclasses.fields(JobContext)}
    expected = JobContext(job_id=7, attempt=2, max_attempts=5, queue="mail", task="send_email",
                          idempotency_key="sqla_queue-job-7", claim_token="tok", priority=3, scheduled_at=None,
                          meta=ctx.meta, is_async=True, _cancel_requested=ctx._cancel_requested)
    assert by_field(ctx) == by_field(expected)
    assert dict(ctx.meta) == {"tenant": "t"} and ctx.cancel_requested is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.attempt = 3  # type: ignore[misc]


def test_the_event_payloads_and_report_types_are_sqla_queue_types_names_too():
    import sqla_queue as sq
    from sqla_queue import events, reports, types
    from sqla_queue.types import JobCompleted, JobView

    assert JobCompleted is events.JobCompleted and JobView is reports.JobView is sq.JobView
    assert all(getattr(types, name) is getattr(events, name) for name in types._EVENTS)
    assert all(getattr(types, name) is getattr(reports, name) for name in types._REPORTS)
    with pytest.raises(AttributeError, match="NoSuchEvent"):
        types.NoSuchEvent  # noqa: B018
