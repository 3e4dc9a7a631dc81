"""Every doctor check seen passing and failing on a real server, in databases these tests
created: transactions, snapshots and locks are held on the tests' own connections, dead tuples
made by deleting rows. Other sessions on a shared server (other test runs) never change a
verdict here: every check is about this database, and the horizon check says so explicitly."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from sqlalchemy import Engine, create_engine, text

import sqla_queue as sq
from sqla_queue.ops.doctor import Doctor, DoctorConfig, Verdict
from sqla_queue.services.registry import WorkerDescription, WorkerRegistration

from waiting import wait_until

NOW = timedelta(0)  # a threshold every open transaction or wait exceeds


@pytest.fixture
def db(own_database):
    url, engine = own_database
    queue = sq.Queue(engine, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")
    return queue, engine


def checks(queue: sq.Queue, **options) -> dict[str, sq.doctor.Check]:
    return {check.name: check for check in Doctor(queue, **options).run().checks}


def verdicts(queue: sq.Queue, **options) -> dict[str, Verdict]:
    return {name: check.verdict for name, check in checks(queue, **options).items()}


def pid_of(conn) -> int:
    return conn.execute(text("SELECT pg_backend_pid()")).scalar_one()


def test_a_fresh_queue_database_passes_every_check(db):
    queue, _ = db
    report = Doctor(queue).run()
    assert {c.name: c.verdict for c in report.checks} == {
        "claim plan": Verdict.OK, "long transactions": Verdict.OK, "lock waits": Verdict.OK,
        "dead tuples": Verdict.OK, "vacuum horizon": Verdict.OK, "stuck jobs": Verdict.OK,
        "recent failures": Verdict.OK, "unserved queues": Verdict.OK, "unregistered tasks": Verdict.OK,
        "queue latency": Verdict.OK,
    }
    assert report.worst() is Verdict.OK


# -- the claim's plan ----------------------------------------------------------------------


def test_claim_plan_passes_on_a_small_table_because_the_index_is_usable(db):
    queue, _ = db
    queue.enqueue_many([{"task": "send_email", "payload": {}}] * 5)
    check = checks(queue)["claim plan"]
    assert check.verdict is Verdict.OK
    assert "sqla_queue_jobs_pending_claim_idx" in check.summary


def test_claim_plan_fails_when_the_pending_index_is_gone(db):
    queue, engine = db
    with engine.begin() as conn:
        conn.execute(text("DROP INDEX sqla_queue_jobs_pending_claim_idx"))
    check = checks(queue)["claim plan"]
    assert check.verdict is Verdict.FAIL
    assert "does not use sqla_queue_jobs_pending_claim_idx" in check.summary and "ANALYZE" in check.hint


# -- transactions, snapshots and locks held on our own connections ---------------------------


@contextmanager
def open_transaction(engine: Engine, *, snapshot: bool = False) -> Iterator[int]:
    """A session in an open transaction; with `snapshot`, one that holds a snapshot (xmin)."""
    with engine.connect() as conn:
        if snapshot:
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        conn.execute(text("SELECT count(*) FROM sqla_queue_jobs"))
        yield pid_of(conn)
        conn.rollback()


def test_long_transaction_fails_while_open_and_passes_once_it_ends(db):
    queue, engine = db
    with open_transaction(engine) as pid:
        check = checks(queue, max_transaction_age=NOW)["long transactions"]
        assert check.verdict is Verdict.FAIL
        assert any(line.startswith(f"pid {pid} ") for line in check.details)
        assert "pg_terminate_backend" in check.hint
    assert checks(queue, max_transaction_age=NOW)["long transactions"].verdict is Verdict.OK


def test_a_snapshot_in_this_database_holds_the_vacuum_horizon_back(db):
    queue, engine = db
    with open_transaction(engine, snapshot=True) as pid:
        check = checks(queue, max_transaction_age=NOW)["vacuum horizon"]
        assert check.verdict is Verdict.FAIL
        assert f"pid {pid} " in check.summary
    assert checks(queue, max_transaction_age=NOW)["vacuum horizon"].verdict is Verdict.OK


def test_a_snapshot_held_past_the_horizon_warning_warns_naming_its_pid_and_query_start(db):
    """Before the limit fails, the holder is named: dead tuples pile up from its first second."""
    queue, engine = db
    with open_transaction(engine, snapshot=True) as pid:
        check = checks(queue, horizon_warning=NOW)["vacuum horizon"]
        assert check.verdict is Verdict.WARN
        assert check.summary.startswith("vacuum of this database is held back by ")
        assert check.summary.endswith("(warns past 0ms, or once 10,000 jobs have finished since it began)")
        assert f"pid {pid} " in check.summary and ", its query started " in check.summary
        assert checks(queue)["vacuum horizon"].verdict is Verdict.OK  # not yet 60 s
    assert checks(queue, horizon_warning=NOW)["vacuum horizon"].verdict is Verdict.OK


def test_a_young_snapshot_warns_once_enough_jobs_finished_since_it_began(db):
    """Age alone warns too late on a busy queue: the claim slows within seconds. A holder
    warns, however young, once `horizon_jobs` jobs have finished since its transaction began
    (each left an entry the claim reads past), and the count is on its line; jobs that
    finished before it began do not count."""
    queue, engine = db
    _finish_jobs(queue, 30)  # before the holder: not its doing
    with open_transaction(engine, snapshot=True) as pid:
        quiet = checks(queue, horizon_jobs=20)["vacuum horizon"]
        _finish_jobs(queue, 12)
        counted = checks(queue, horizon_jobs=20)["vacuum horizon"]
        _finish_jobs(queue, 12)
        busy = checks(queue, horizon_jobs=20)["vacuum horizon"]
        off = checks(queue, horizon_jobs=0)["vacuum horizon"]
    assert quiet.verdict is Verdict.OK and counted.verdict is Verdict.OK
    [line] = [d for d in counted.details if d.startswith(f"pid {pid} ")]
    assert ", 12 jobs finished since it began" in line
    assert busy.verdict is Verdict.WARN
    assert f"pid {pid} " in busy.summary and ", at least 20 jobs finished since it began" in busy.summary
    assert off.verdict is Verdict.OK and "jobs finished" not in " ".join(off.details)


def _finish_jobs(queue: sq.Queue, n: int) -> None:
    """`n` jobs enqueued, claimed and completed, each step committed."""
    queue.enqueue_many([{"task": "send_email", "payload": {}} for _ in range(n)])
    queue.complete_many(queue.claim(worker_id="doctor-test", limit=n))


def test_a_snapshot_in_another_database_is_listed_but_does_not_fail_this_one(db, create_database):
    queue, _ = db
    elsewhere = create_engine(create_database())
    try:
        with open_transaction(elsewhere, snapshot=True) as pid:
            check = checks(queue, max_transaction_age=NOW)["vacuum horizon"]
            assert check.verdict is Verdict.OK
            [line] = [d for d in check.details if d.startswith(f"pid {pid} ")]
            assert "[other database: does not hold back this one]" in line
    finally:
        elsewhere.dispose()


def test_a_lock_wait_on_the_queue_table_fails_until_the_blocker_lets_go(db):
    queue, engine = db
    job_id = queue.enqueue("send_email", {})
    with engine.connect() as holder:
        holder.execute(text("SELECT id FROM sqla_queue_jobs WHERE id = :id FOR UPDATE"), {"id": job_id})
        holder_pid = pid_of(holder)
        waiter_pid: list[int] = []
        waiter = threading.Thread(target=_update_job, args=(engine, job_id, waiter_pid))
        waiter.start()
        try:
            wait_until(lambda: _waiting(engine, holder_pid), "the waiter to queue behind the row lock")
            check = checks(queue, max_lock_wait=NOW)["lock waits"]
            assert check.verdict is Verdict.FAIL
            assert any(f"blocked by {holder_pid}" in line for line in check.details), check.details
        finally:
            holder.rollback()
            waiter.join(timeout=30)
    assert not waiter.is_alive()
    assert checks(queue, max_lock_wait=NOW)["lock waits"].verdict is Verdict.OK


def _update_job(engine: Engine, job_id: int, pid: list[int]) -> None:
    with engine.begin() as conn:
        pid.append(pid_of(conn))
        conn.execute(text("UPDATE sqla_queue_jobs SET last_error = 'operator' WHERE id = :id"), {"id": job_id})


def _waiting(engine: Engine, holder_pid: int) -> bool:
    with engine.connect() as conn:
        return bool(conn.execute(text(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND waitstart IS NOT NULL"
            " AND :holder = ANY (pg_blocking_pids(pid))"), {"holder": holder_pid}).scalar_one())


def test_a_check_that_cannot_finish_fails_with_the_reason_instead_of_hanging(db):
    queue, engine = db
    with engine.connect() as migration:  # e.g. an ALTER TABLE queued behind nothing, holding on
        migration.execute(text("LOCK TABLE sqla_queue_jobs IN ACCESS EXCLUSIVE MODE"))
        found = checks(queue)
        migration.rollback()
    plan = found["claim plan"]
    assert plan.verdict is Verdict.FAIL
    assert plan.summary.startswith("could not run this check:") and "lock timeout" in plan.summary
    assert found["stuck jobs"].verdict is Verdict.FAIL
    assert found["vacuum horizon"].verdict is Verdict.OK  # catalog views do not wait on the table


def test_an_unreachable_database_is_an_error_not_a_report():
    queue = sq.Queue("postgresql://nobody@127.0.0.1:1/nowhere", load_entrypoints=False)
    with pytest.raises(sq.DatabaseError):
        Doctor(queue).run()


# -- dead tuples -------------------------------------------------------------------------------


def test_dead_tuples_fail_until_vacuum_removes_them(db, count_jobs):
    queue, engine = db
    with engine.begin() as conn:  # autovacuum must not clean up behind the test's back
        conn.execute(text("ALTER TABLE sqla_queue_jobs SET (autovacuum_enabled = false)"))
    with engine.connect() as conn:
        conn.execute(text("INSERT INTO sqla_queue_jobs (queue_name, task, payload, status, completed_at, locked_at)"
                          " SELECT 'default', 'send_email', '{}', 'completed', now(), now()"
                          " FROM generate_series(1, 20000)"))
        conn.commit()
        assert queue.prune(completed_after=timedelta(seconds=1), batch_size=100_000).completed == 0
        conn.execute(text("DELETE FROM sqla_queue_jobs"))
        conn.commit()
        conn.execute(text("SELECT pg_stat_force_next_flush()"))  # counts reach shared stats when idle
        conn.execute(text("SELECT 1"))

    check = checks(queue)["dead tuples"]
    assert check.verdict is Verdict.FAIL
    assert check.summary.startswith("20000 dead and 0 live tuples") and "VACUUM" in check.hint

    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM sqla_queue_jobs"))
    check = checks(queue)["dead tuples"]
    assert check.verdict is Verdict.OK and check.summary.startswith("0 dead")


# -- jobs past their lease, recent failures ------------------------------------------------


def test_jobs_stuck_past_their_lease_fail_until_recovered(db):
    queue, engine = db
    queue.enqueue("send_email", {})
    queue.claim(worker_id="crashed")
    assert checks(queue)["stuck jobs"].verdict is Verdict.OK  # a fresh lease is fine
    with engine.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET lease_expires_at = NULL, locked_at = clock_timestamp() - interval '1 hour'"))
    check = checks(queue)["stuck jobs"]
    assert check.verdict is Verdict.FAIL and check.details[0].startswith("queue default: 1 job(s)")
    queue.recover_expired(lease=60)
    assert checks(queue)["stuck jobs"].verdict is Verdict.OK


def test_a_job_is_stuck_when_its_holders_lease_ended_more_than_a_lease_ago(db):
    """Judged by the holder's own lease end, with doctor's lease (60 s) as the grace that
    recovery (each half lease) needs: not by when the claim started."""
    queue, engine = db
    queue.enqueue("send_email", {})
    queue.claim(worker_id="slow", lease=timedelta(hours=2))

    def stuck_after(update: str) -> Verdict:
        with engine.begin() as conn:
            conn.execute(text(f"UPDATE sqla_queue_jobs SET {update}"))
        return checks(queue)["stuck jobs"].verdict

    assert stuck_after("locked_at = clock_timestamp() - interval '1 hour'") is Verdict.OK  # leased for 2 h
    assert stuck_after("lease_expires_at = clock_timestamp() - interval '30 seconds'") is Verdict.OK  # recovery due
    assert stuck_after("lease_expires_at = clock_timestamp() - interval '10 minutes'") is Verdict.FAIL


def test_recent_failures_warn_fail_past_a_limit_and_age_out(db):
    queue, engine = db
    queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w")
    queue.fail(job.id, job.claim_token, error="smtp: 550 mailbox unavailable")

    warned = checks(queue)["recent failures"]
    assert warned.verdict is Verdict.WARN
    assert warned.details == ("queue default: 1 failed, latest error: smtp: 550 mailbox unavailable",)
    assert verdicts(queue, max_failed=0)["recent failures"] is Verdict.FAIL
    with engine.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET failed_at = now() - interval '2 hours'"))
    assert verdicts(queue, max_failed=0)["recent failures"] is Verdict.OK


def test_strict_turns_warnings_into_a_failure(db):
    queue, _ = db
    queue.enqueue("send_email", {})
    [job] = queue.claim(worker_id="w")
    queue.fail(job.id, job.claim_token, error="boom")
    report = Doctor(queue).run()
    assert report.worst() is Verdict.WARN and report.worst(strict=True) is Verdict.FAIL


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"lease": 0}, "lease must be positive"),
        ({"max_transaction_age": -1}, "max_transaction_age must be non-negative"),
        ({"max_failed": -1}, "max_failed must be a non-negative integer"),
        ({"dead_tuples_ratio": 0}, "dead_tuples_ratio must be a positive number"),
        ({"claim_queue": ""}, "claim_queue must not be empty"),
        ({"max_lock_wiat": 1}, "unknown doctor option"),
    ],
)
def test_bad_thresholds_are_refused(db, options, message):
    queue, _ = db
    with pytest.raises(sq.ConfigurationError, match=message):
        Doctor(queue, **options)


def test_config_and_options_do_not_mix(db):
    queue, _ = db
    with pytest.raises(sq.ConfigurationError, match="not both"):
        Doctor(queue, DoctorConfig(), lease=60)


def test_other_sessions_sql_is_shown_without_its_literals(db):
    """D7: doctor (CLI and dashboard) quoted other sessions' SQL as-is, literals included."""
    queue, engine = db
    with engine.connect() as conn:
        conn.execute(text("SELECT 'hunter2' AS password, 4111111111111111 AS card"))  # opens the transaction
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        conn.execute(text("SELECT 'hunter2' AS password, 4111111111111111 AS card"))  # its last query
        check = checks(queue, max_transaction_age=NOW)["long transactions"]
        line = next(line for line in check.details if line.startswith(f"pid {pid} "))
        conn.rollback()
    assert "hunter2" not in line and "4111111111111111" not in line
    assert "SELECT ? AS password, ? AS card" in line


# -- work that no worker takes: the worker registry against the eligible jobs ---------------


def live_worker(queue: sq.Queue, worker_id: str, queues: list[str], tasks: list[str]) -> WorkerRegistration:
    """A worker's row in the registry, written as a worker writes it (alive for a minute)."""
    registration = WorkerRegistration(queue.core, WorkerDescription.of_this_process(
        worker_id, queues, tasks, 1, timedelta(minutes=1)))
    assert registration.register()
    return registration


def test_eligible_jobs_with_no_worker_running_fail_naming_their_queue(db):
    queue, _ = db
    queue.enqueue_many([{"task": "send_email", "payload": {"n": n}, "queue": "emails"} for n in range(5)])
    report = Doctor(queue).run()
    check = {c.name: c for c in report.checks}["unserved queues"]
    assert check.verdict is Verdict.FAIL and report.worst() is Verdict.FAIL
    assert "no live worker serves: emails" in check.summary
    assert check.details[0].startswith("queue emails: 5 eligible job(s), oldest waiting")


def test_a_live_worker_serving_the_queue_turns_it_green(db):
    queue, _ = db
    queue.enqueue_many([{"task": "send_email", "payload": {"n": n}, "queue": "emails"} for n in range(5)])
    live_worker(queue, "w-1", ["emails"], ["send_email"])
    found = verdicts(queue)
    assert (found["unserved queues"], found["unregistered tasks"], found["queue latency"]) == (Verdict.OK,) * 3


def test_a_dead_worker_serves_nothing_and_a_paused_queue_waits_on_purpose(db):
    queue, engine = db
    queue.enqueue("send_email", {}, queue="emails")
    queue.enqueue("send_email", {}, queue="held")
    queue.pause("held")
    live_worker(queue, "w-dead", ["emails", "held"], ["send_email"])
    with engine.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs_workers SET expires_at = now() - interval '1 second'"))
    check = checks(queue)["unserved queues"]
    assert check.verdict is Verdict.FAIL and check.summary.endswith("serves: emails")  # not the paused one


def test_scheduled_jobs_are_not_waiting_on_anyone(db):
    queue, _ = db
    queue.enqueue("send_email", {}, queue="emails", delay=timedelta(hours=1))
    assert verdicts(queue)["unserved queues"] is Verdict.OK


def test_deploy_skew_names_the_task_that_no_live_worker_registers(db):
    queue, _ = db
    queue.task(lambda payload, ctx: None, name="send_invoice")  # new code enqueues a new task
    queue.enqueue_many([{"task": "send_invoice", "payload": {}, "queue": "emails"}] * 3
                       + [{"task": "send_email", "payload": {}, "queue": "emails"}])
    live_worker(queue, "old-worker", ["emails"], ["send_email"])
    found = checks(queue)
    assert found["unserved queues"].verdict is Verdict.OK
    skew = found["unregistered tasks"]
    assert skew.verdict is Verdict.FAIL
    assert skew.details == ("task send_invoice: 3 job(s), no live worker registers it (queue emails)",)
    live_worker(queue, "new-worker", ["emails"], ["send_email", "send_invoice"])
    assert verdicts(queue)["unregistered tasks"] is Verdict.OK


def test_queue_latency_fails_when_the_oldest_eligible_job_waited_longer_than_max_latency(db):
    queue, engine = db
    queue.enqueue("send_email", {})
    queue.enqueue("send_email", {}, queue="emails")
    live_worker(queue, "w-1", ["default", "emails"], ["send_email"])
    with engine.begin() as conn:  # the default queue's job has been due for ten minutes
        conn.execute(text("UPDATE sqla_queue_jobs SET run_at = now() - interval '10 minutes' "
                          "WHERE queue_name = 'default'"))
    check = checks(queue)["queue latency"]
    assert check.verdict is Verdict.FAIL
    assert "more than 5m00s: default" in check.summary and len(check.details) == 1
    assert checks(queue, max_latency=timedelta(minutes=15))["queue latency"].verdict is Verdict.OK


def test_max_latency_must_be_a_duration(db):
    queue, _ = db
    with pytest.raises(sq.ConfigurationError, match="max_latency"):
        Doctor(queue, max_latency="soon")
