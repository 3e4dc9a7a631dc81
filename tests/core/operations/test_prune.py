"""Retention: old finished jobs and counters go in bounded batches; active jobs never do."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text

import sqla_queue as sq
from sqla_queue.services.pruning import PruneConfig, Pruner, PruneResult


@pytest.fixture
def history(ops_queue, run_sql):
    """25 completed and 7 failed jobs from last month, 5 and 2 from today, and active jobs
    whose finished-at columns were (wrongly) set long ago: those must survive any pruning."""
    ops_queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(39)])
    jobs = ops_queue.claim(worker_id="w", limit=39)
    for job in jobs[:30]:
        ops_queue.complete(job.id, job.claim_token)
    for job in jobs[30:39]:
        ops_queue.fail(job.id, job.claim_token, error="boom")
    run_sql("UPDATE sqla_queue_jobs SET completed_at = now() - interval '30 days' WHERE id <= 25")
    run_sql("UPDATE sqla_queue_jobs SET failed_at = now() - interval '30 days' WHERE id BETWEEN 31 AND 37")
    ops_queue.enqueue("send_email", {})
    running = ops_queue.claim(worker_id="w")[0].id
    pending = ops_queue.enqueue("send_email", {})
    run_sql("UPDATE sqla_queue_jobs SET completed_at = now() - interval '90 days',"
            " failed_at = now() - interval '90 days' WHERE id IN (:a, :b)", a=pending, b=running)
    return {"pending": pending, "running": running}


def active_rows(run_sql):
    return run_sql("SELECT * FROM sqla_queue_jobs WHERE status IN ('pending', 'running') ORDER BY id")


def test_one_batch_deletes_at_most_batch_size_of_each_kind(ops_queue, history, count_jobs):
    pruner = Pruner(ops_queue.core, PruneConfig(completed_after=timedelta(days=7),
                                           failed_after=timedelta(days=7), batch_size=10))
    result = pruner.run_once()
    assert (result.completed, result.failed) == (10, 7)
    assert count_jobs("status = 'completed'") == 20


def test_run_deletes_every_old_finished_job_and_nothing_else(ops_queue, history, count_jobs, run_sql):
    before = active_rows(run_sql)
    config = PruneConfig(completed_after=timedelta(days=7), failed_after=timedelta(days=7), batch_size=10)

    result = Pruner(ops_queue.core, config).run()

    assert (result.completed, result.failed) == (25, 7)
    assert result.batches == 3 + 1 + 1  # completed: 10, 10, 5; failed: 7; counters: 1
    assert count_jobs("status = 'completed'") == 5 and count_jobs("status = 'failed'") == 2
    assert active_rows(run_sql) == before
    assert ops_queue.get_job(history["pending"]).status is sq.JobStatus.PENDING
    assert ops_queue.get_job(history["running"]).status is sq.JobStatus.RUNNING


def test_completed_and_failed_retention_are_separate(ops_queue, history, count_jobs):
    result = ops_queue.prune(completed_after=timedelta(days=7))
    assert (result.completed, result.failed) == (25, 0)
    assert count_jobs("status = 'failed'") == 9
    result = ops_queue.prune(failed_after=timedelta(days=60))
    assert result.jobs == 0


def test_old_counters_are_pruned_and_recent_ones_kept(ops_queue, run_sql, counters):
    run_sql("INSERT INTO sqla_queue_jobs_counters VALUES"
            " (date_trunc('minute', now()) - interval '2 days', 'default', 'retried', 3),"
            " (date_trunc('minute', now()), 'default', 'retried', 1)")
    result = ops_queue.prune(completed_after=timedelta(days=7))
    assert result.counters == 1
    assert counters() == {("default", "retried"): 1}


def test_a_row_someone_holds_is_skipped_not_waited_for(ops_queue, history, engine, count_jobs):
    with engine.connect() as holder:
        holder.execute(text("SELECT id FROM sqla_queue_jobs WHERE id = 1 FOR UPDATE"))
        result = ops_queue.prune(completed_after=timedelta(days=7))
        holder.rollback()
    assert result.completed == 24
    assert ops_queue.prune(completed_after=timedelta(days=7)).completed == 1


def test_results_add_up():
    assert PruneResult(1, 2, 3, 4) + PruneResult(10, 20, 30, 40) == PruneResult(11, 22, 33, 44)
    assert PruneResult(completed=2, failed=3).jobs == 5


def test_run_if_due_prunes_then_waits_for_its_interval(ops_queue, history):
    pruner = Pruner(ops_queue.core, PruneConfig(completed_after=timedelta(days=7), interval=3600))
    assert pruner.run_if_due().completed == 25
    assert pruner.run_if_due() is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"completed_afer": 60}, "unknown pruning option 'completed_afer'; did you mean 'completed_after'?"),
        ({}, "pruning needs completed_after, failed_after or cancelled_after"),
        ({"failed_after": timedelta(days=-1)}, "failed_after must be positive"),
        ({"completed_after": 0}, "completed_after must be positive"),
        ({"completed_after": "7d"}, "completed_after must be a timedelta or seconds, got str"),
        ({"completed_after": 60, "counters_after": float("inf")}, "counters_after must be finite"),
        ({"completed_after": 60, "batch_size": 0}, "batch_size must be a positive integer"),
        ({"completed_after": 60, "batch_size": 10**6}, "batch_size must be at most 100000"),
        ({"completed_after": 60, "max_batches": 1.5}, "max_batches must be a positive integer"),
        ({"completed_after": 60, "interval": 0}, "interval must be a positive number of seconds"),
    ],
)
def test_bad_options_are_refused_and_nothing_is_deleted(ops_queue, history, count_jobs, options, message):
    before = count_jobs()
    with pytest.raises(sq.ConfigurationError, match=message.replace("?", r"\?")):
        PruneConfig.build(**options)
    with pytest.raises(sq.InvalidInputError, match=message.replace("?", r"\?")):
        ops_queue.prune(**options)
    assert count_jobs() == before


def test_a_pruner_needs_a_config_object(ops_queue):
    with pytest.raises(sq.ConfigurationError, match="pruning must be a PruneConfig, got dict"):
        Pruner(ops_queue.core, {"completed_after": 60})


def test_a_worker_with_pruning_deletes_old_finished_jobs_as_it_runs(ops_queue, history, count_jobs):
    config = PruneConfig(completed_after=timedelta(days=7), failed_after=timedelta(days=7), batch_size=10)
    summary = ops_queue.worker(poll_interval=0.05, pruning=config).run(until_empty=True)

    assert summary.completed == 1  # the pending job ran; the pruner ran on the first round
    assert count_jobs("status = 'completed'") == 5 + 1
    assert count_jobs("status = 'failed'") == 2
    assert count_jobs("status = 'running'") == 1  # another worker's job, untouched


def test_a_worker_refuses_a_pruning_option_that_is_not_a_config(ops_queue):
    with pytest.raises(sq.ConfigurationError, match="pruning must be a PruneConfig, got dict"):
        ops_queue.worker(pruning={"completed_after": 60})
    with pytest.raises(sq.ConfigurationError, match="did you mean 'pruning'"):
        ops_queue.worker(prunning=None)
