"""The recovery service (`sqla_queue.services.recovery`): a validated config, bounded batches whose
results say what was recovered, and the periodic pass a worker's claim loop makes."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

import sqla_queue as sq
from sqla_queue.errors import ConfigurationError
from sqla_queue.services.recovery import Recoverer, RecoveryConfig, RecoveryResult


@pytest.fixture
def expired(queue, engine):
    """Factory: `n` running jobs of `task` whose leases expired an hour ago; their ids."""

    def make(n: int, task: str = "send_email") -> list[int]:
        queue.enqueue_many([{"task": task, "payload": {"n": i}} for i in range(n)])
        jobs = queue.claim(queue=queue.get_task(task).queue, worker_id="gone", limit=n)
        with engine.begin() as conn:
            conn.execute(text("UPDATE sqla_queue_jobs SET locked_at = clock_timestamp() - interval '1 hour', "
                              "lease_expires_at = clock_timestamp() - interval '59 minutes' WHERE status = 'running'"))
        return sorted(job.id for job in jobs)

    return make


def statuses(engine) -> dict[int, str]:
    with engine.connect() as conn:
        return dict(conn.execute(text("SELECT id, status FROM sqla_queue_jobs")).all())


@pytest.mark.parametrize(("options", "field"), [
    ({"lease": 0}, "lease"),
    ({"lease": -5}, "lease"),
    ({"lease": "60"}, "lease"),
    ({"lease": float("nan")}, "lease"),
    ({"batch_limit": 0}, "batch_limit"),
    ({"batch_limit": True}, "batch_limit"),
    ({"batch_limit": 2.5}, "batch_limit"),
    ({"max_rounds": 0}, "max_rounds"),
    ({"max_rounds": None}, "max_rounds"),
    ({"interval": 0}, "interval"),
    ({"interval": -1.0}, "interval"),
    ({"interval": "often"}, "interval"),
])
def test_a_bad_option_is_a_configuration_error_naming_it(options, field):
    with pytest.raises(ConfigurationError, match=field):
        RecoveryConfig(**options)


def test_a_misspelt_option_gets_a_suggestion():
    with pytest.raises(ConfigurationError, match="did you mean 'batch_limit'"):
        RecoveryConfig.build(batch_limt=10)


def test_the_interval_defaults_to_half_the_lease_and_at_least_a_second():
    assert RecoveryConfig(lease=timedelta(seconds=60)).interval == 30.0
    assert RecoveryConfig(lease=1).interval == 1.0
    assert RecoveryConfig(lease=60, interval=timedelta(seconds=5)).interval == 5.0
    assert RecoveryConfig(lease=60).lease == timedelta(seconds=60)


def test_a_recoverer_needs_a_config_object(queue):
    with pytest.raises(ConfigurationError, match="RecoveryConfig"):
        Recoverer(queue.core, {"lease": 60})


def test_run_once_takes_back_one_batch_and_says_which_jobs(queue, engine, expired):
    ids = expired(5)
    result = Recoverer(queue.core, RecoveryConfig(lease=60, batch_limit=2)).run_once()

    assert result.batches == 1 and not result.caught_up
    assert len(result.recovered) == 2 and set(result.recovered) <= set(ids)
    now = statuses(engine)
    assert {job_id for job_id in ids if now[job_id] == "pending"} == set(result.recovered)


def test_a_periodic_pass_stops_after_max_rounds_and_run_catches_up(queue, engine, expired):
    ids = expired(5)
    recoverer = Recoverer(queue.core, RecoveryConfig(lease=60, batch_limit=2, max_rounds=2, interval=3600))

    bounded = recoverer.run_if_due()
    assert bounded.batches == 2 and not bounded.caught_up and len(bounded.recovered) == 4

    rest = recoverer.run()
    assert rest.caught_up and rest.batches == 1 and len(rest.recovered) == 1
    assert sorted(bounded.recovered + rest.recovered) == ids
    assert set(statuses(engine).values()) == {"pending"}


def test_a_pass_is_not_due_again_within_the_interval(queue, expired):
    expired(1)
    recoverer = Recoverer(queue.core, RecoveryConfig(lease=60, interval=3600))

    assert len(recoverer.run_if_due().recovered) == 1
    expired(1)
    assert recoverer.run_if_due() is None


def test_jobs_on_their_last_attempt_are_failed_and_reported_with_the_requeued(queue, engine, expired):
    queue.task(name="once", max_attempts=1)(lambda payload, ctx: None)
    requeued = expired(1)
    failed = expired(1, task="once")

    result = Recoverer(queue.core, RecoveryConfig(lease=60)).run_once()

    assert sorted(result.recovered) == sorted(requeued + failed)
    assert result.caught_up
    now = statuses(engine)
    assert [now[i] for i in requeued] == ["pending"] and [now[i] for i in failed] == ["failed"]


def test_a_live_lease_is_left_alone(queue, engine):
    queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="alive")

    result = Recoverer(queue.core, RecoveryConfig(lease=60)).run()

    assert result == RecoveryResult(recovered=(), batches=1, caught_up=True)
    assert queue.get_job(job.id).status is sq.JobStatus.RUNNING


def test_the_run_workers_example_runs(queue, expired, capsys):
    doc = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "run-workers.md"
    [example] = [b for b in re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S) if "Recoverer" in b]
    expired(3)

    exec(compile(example, "run-workers.md (recovery example)", "exec"), {"queue": queue})

    assert capsys.readouterr().out == "3 jobs taken back in 1 batches\n"


def test_a_recoverer_with_a_short_lease_leaves_a_job_its_holder_still_leases(queue, engine):
    """A worker (or `sqla-queue recover`) configured with a shorter lease than the holder's
    takes back nothing the holder still leases; once the holder's own lease ends, it does."""
    job_id = queue.enqueue("send_email", {})
    queue.claim(worker_id="long-lease", lease=timedelta(seconds=30))
    with engine.begin() as conn:  # claimed 5 s ago: 25 s of its own lease left
        conn.execute(text("UPDATE sqla_queue_jobs SET locked_at = locked_at - interval '5 seconds', "
                          "lease_expires_at = lease_expires_at - interval '5 seconds'"))
    recoverer = Recoverer(queue.core, RecoveryConfig(lease=1))

    assert recoverer.run_once().recovered == ()
    assert statuses(engine) == {job_id: "running"}

    with engine.begin() as conn:  # the holder stopped renewing: its lease ran out
        conn.execute(text("UPDATE sqla_queue_jobs SET lease_expires_at = clock_timestamp() - interval '1 second'"))
    assert recoverer.run_once().recovered == (job_id,)
