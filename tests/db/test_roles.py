"""docs/how-to/database-roles.md, run as written: the page's SQL makes its four roles (and its
logins) on a fresh database, then each login does its part and is refused everything else with
`sq.PermissionDeniedError` (SQLSTATE 42501)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import text

import sqla_queue as sq
from sqla_queue.ops.doctor import Doctor, Verdict
from sqla_queue.services.registry import WorkerDescription, WorkerRegistration
from sqla_queue.services.pruning import PruneConfig
from sqla_queue.services.scheduler import Scheduler, last_ticks

from roles import Roles, grant_blocks
from waiting import wait_until

INSTALL = ("roles", "producer", "worker", "worker: pruning", "observer", "operator", "logins")
"""The page's blocks in page order, all but the producer's optional grant for `wait`."""


@pytest.fixture(scope="module")
def roles(create_database):
    made = Roles(create_database())
    try:
        made.run(*INSTALL)
        yield made
    finally:
        made.drop()


def with_tasks(queue: sq.Queue, queue_name: str) -> sq.Queue:
    """`send` (completes), `flaky` (fails its first attempt), `broken` (always fails) and
    `chain` (enqueues a `send`), all on `queue_name`."""

    @queue.task(queue=queue_name)
    def send(payload, ctx):
        return {"sent": payload.get("to")}

    @queue.task(queue=queue_name, retry_delay=0)
    def flaky(payload, ctx):
        if ctx.attempt == 1:
            raise ConnectionError("smtp timeout")

    @queue.task(queue=queue_name, max_attempts=1)
    def broken(payload, ctx):
        raise ValueError("bad address")

    @queue.task(queue=queue_name)
    def chain(payload, ctx):
        queue.enqueue("send", {"to": "next"})

    return queue


def admin_queue(roles: Roles, queue_name: str) -> sq.Queue:
    """A queue on the superuser's connection, to set up what a test's role then meets."""
    queue = sq.Queue(roles.url, load_entrypoints=False)
    roles.queues.append(queue)
    return with_tasks(queue, queue_name)


def rows(roles: Roles, queue_name: str) -> dict[int, tuple]:
    with roles.admin.connect() as conn:
        return {row.id: (row.task, row.status, row.attempts) for row in conn.execute(
            text("SELECT id, task, status, attempts FROM sqla_queue_jobs WHERE queue_name = :q"), {"q": queue_name})}


def refused(*calls) -> None:
    for call in calls:
        with pytest.raises(sq.PermissionDeniedError, match="permission denied"):
            call()


def test_every_block_on_the_page_is_run_by_these_tests():
    assert list(grant_blocks()) == ["roles", "producer", "producer: wait", "producer: workflows", "worker",
                                    "worker: pruning", "observer", "operator", "logins"]


def test_the_producer_enqueues_and_does_nothing_else(roles):
    producer = with_tasks(roles.queue("producer"), "producing")
    first = producer.enqueue("send", {"to": "a@example.com"}, idempotency_key="order-1", meta={"trace": "t1"})
    assert producer.enqueue("send", {"to": "a@example.com"}, idempotency_key="order-1") == first
    many = producer.enqueue_many([
        {"task": "send", "payload": {"to": "b"}, "idempotency_key": "order-1"},
        {"task": "send", "payload": {"to": "c"}, "idempotency_key": "order-2", "priority": 5},
        {"task": "send", "payload": {"to": "d"}, "delay": 60},
    ])
    assert many[0] == first
    with producer.engine.begin() as conn:  # in the application's own transaction
        in_transaction = producer.enqueue("send", {"to": "e"}, connection=conn)
    assert set(rows(roles, "producing")) == {first, *many[1:], in_transaction}

    admin = admin_queue(roles, "producing")
    [claimed] = admin.claim("producing", worker_id="someone else")
    refused(
        lambda: producer.claim("producing", worker_id="producer"),
        lambda: producer.complete(claimed.id, claimed.claim_token),
        lambda: producer.cancel(first),
        lambda: producer.retry_now(first),
        lambda: producer.pause("producing"),
        lambda: producer.prune(completed_after=timedelta(days=1)),
        lambda: producer.get_job(first),
        lambda: producer.list_jobs(),
        lambda: producer.stats(),
    )


def test_a_producer_with_the_wait_grant_waits_for_its_job(create_database):
    roles = Roles(create_database())
    try:
        roles.run("roles", "producer", "worker", "logins")
        producer = with_tasks(roles.queue("producer"), "waiting")
        job_id = producer.enqueue("send", {"to": "w"})
        refused(lambda: producer.wait(job_id, timeout=0.1))

        roles.run("producer: wait")
        waited: list[sq.JobView] = []
        waiting = threading.Thread(target=lambda: waited.append(producer.wait(job_id, timeout=60)))
        waiting.start()
        wait_until(lambda: _watched(roles, job_id), "the producer to watch its job")
        worker = with_tasks(roles.queue("worker"), "waiting")
        worker.worker(queues=["waiting"], poll_interval=0.05).run(until_empty=True)
        waiting.join(timeout=60)
        assert waited[0].status is sq.JobStatus.COMPLETED and waited[0].result == {"sent": "w"}
    finally:
        roles.drop()


def test_a_producer_with_the_workflows_grant_enqueues_dependent_jobs_and_a_worker_runs_them(create_database):
    roles = Roles(create_database())
    try:
        roles.run("roles", "producer", "worker", "logins")
        producer = with_tasks(roles.queue("producer"), "flows")
        first = producer.enqueue("send", {"to": "a"})
        refused(lambda: producer.enqueue("send", {"to": "b"}, depends_on=[first]))

        roles.run("producer: workflows")
        second = producer.enqueue("send", {"to": "b"}, depends_on=[first])
        steps = producer.chain([("send", {"to": "c"}), ("send", {"to": "d"})])
        assert rows(roles, "flows")[second][1] == "waiting"
        worker = with_tasks(roles.queue("worker"), "flows")
        assert worker.worker(queues=["flows"], poll_interval=0.05).run(until_empty=True).completed == 4
        assert {status for _, status, _ in rows(roles, "flows").values()} == {"completed"}
        assert set(rows(roles, "flows")) == {first, second, *steps}
    finally:
        roles.drop()


def _watched(roles: Roles, job_id: int) -> bool:
    with roles.admin.connect() as conn:
        return conn.execute(text("SELECT watched FROM sqla_queue_jobs WHERE id = :id"), {"id": job_id}).scalar_one()


def test_the_worker_claims_records_renews_recovers_ticks_samples_and_prunes(roles):
    admin = admin_queue(roles, "working")
    worker_queue = with_tasks(roles.queue("worker"), "working")

    @worker_queue.periodic(every=3600, queue="working", backfill=True)
    def hourly(payload, ctx):
        return None

    crashed = admin.enqueue("send", {"to": "crashed"})
    assert [job.id for job in admin.claim("working", worker_id="killed")] == [crashed]
    jobs = admin.enqueue_many([{"task": task, "payload": {}} for task in ("send", "flaky", "broken", "chain")])
    old = admin.enqueue("send", {"to": "old"})
    with roles.admin.begin() as conn:  # a claim that expired long ago, a job finished a month ago
        conn.execute(text("UPDATE sqla_queue_jobs SET locked_at = now() - interval '1 hour', "
                          "lease_expires_at = now() - interval '59 minutes' WHERE id = :id"), {"id": crashed})
        conn.execute(text("UPDATE sqla_queue_jobs SET status = 'completed', completed_at = now() - interval "
                          "'30 days' WHERE id = :id"), {"id": old})

    # A tick, enqueued by a scheduler that started two hours ago; then a backfill.
    start = datetime.now(timezone.utc) - timedelta(hours=4)
    clock = iter([start, start + timedelta(hours=2), start + timedelta(hours=4)])
    scheduler = Scheduler(worker_queue.core, clock=lambda: next(clock))
    assert [scheduler.run_once() for _ in range(3)] == [0, 1, 2]
    assert last_ticks(worker_queue.core)["hourly"] > start + timedelta(hours=3)

    summary = worker_queue.worker(
        queues=["working"], concurrency=2, poll_interval=0.05, lease=timedelta(minutes=5),
        pruning=PruneConfig(completed_after=timedelta(days=7)), sample_interval=0.01,
    ).run(until_empty=True)
    assert summary.failed == 1 and summary.retried == 1
    found = rows(roles, "working")
    assert old not in found  # pruned
    assert found[crashed] == ("send", "completed", 2)  # recovered, then run again
    assert set(jobs) < set(found)
    assert sorted((task, status) for task, status, _ in found.values()) == [  # the chained send, three ticks
        ("broken", "failed"), ("chain", "completed"), ("flaky", "completed"), *[("hourly", "completed")] * 3,
        *[("send", "completed")] * 3]
    with roles.admin.connect() as conn:
        kinds = set(conn.execute(text("SELECT kind FROM sqla_queue_jobs_counters WHERE queue_name = 'working'"))
                    .scalars())
    assert {"retried", "lease_recovered"} <= kinds
    assert isinstance(worker_queue.record_sample(), int)

    # Renewing and giving back a lease, outside the worker.
    admin.enqueue("send", {"to": "held"})
    [held] = worker_queue.claim("working", worker_id="by hand")
    assert worker_queue.renew([held]) == {held.id: False}
    assert worker_queue.release([held]) == [held.id]

    # Its row in the worker registry: written at start and on each beat, deleted at exit.
    registration = WorkerRegistration(worker_queue.core, WorkerDescription.of_this_process(
        "role-worker", ["working"], worker_queue.task_names, 2, timedelta(minutes=1)))
    assert registration.register() and registration.beat()
    assert [w.worker_id for w in admin.workers()] == ["role-worker"]
    assert registration.remove() and admin.workers() == []

    refused(lambda: worker_queue.pause("working"), lambda: worker_queue.resume("working"))


def test_the_observer_reads_everything_and_writes_nothing(roles):
    admin = admin_queue(roles, "observed")
    job_id = admin.enqueue("send", {"to": "o"})
    observer = with_tasks(roles.queue("observer"), "observed")

    assert "observed" in observer.stats().queues
    assert observer.get_job(job_id).payload == {"to": "o"}
    assert [job.id for job in observer.list_jobs(queue="observed").jobs] == [job_id]
    assert isinstance(observer.history(queue_name="observed"), list)
    assert isinstance(observer.workers_seen(), list)
    assert isinstance(observer.workers(), list)
    assert "observed" in {state.name for state in observer.list_queues()}

    with roles.admin.connect() as other_role:  # a transaction another role keeps open
        other_role.execute(text("SELECT txid_current()"))
        pid = other_role.execute(text("SELECT pg_backend_pid()")).scalar_one()
        checks = {check.name: check for check in Doctor(observer, max_transaction_age=0).run().checks}
        roles.sql("REVOKE pg_monitor FROM queue_observer")
        try:
            blind = Doctor(observer, max_transaction_age=0).check_long_transactions
            with observer.engine.connect() as conn:
                without_monitor = blind(conn)
        finally:
            roles.sql("GRANT pg_monitor TO queue_observer")
        other_role.rollback()
    seen = checks["long transactions"]  # pg_monitor shows it
    assert seen.verdict is Verdict.FAIL and any(f"pid {pid} " in line for line in seen.details)
    assert without_monitor.verdict is Verdict.WARN  # hidden, but doctor says it cannot see
    assert "hide their transactions" in without_monitor.summary and "pg_monitor" in without_monitor.hint
    plan = checks["claim plan"]  # EXPLAIN of the claim needs UPDATE: a warning, not a failure
    assert plan.verdict is Verdict.WARN and "may not run this check" in plan.summary
    assert "database-roles.md" in plan.hint

    refused(
        lambda: observer.cancel(job_id),
        lambda: observer.retry_now(job_id),
        lambda: observer.cancel_jobs(queue_name="observed"),
        lambda: observer.enqueue("send", {}),
        lambda: observer.claim("observed", worker_id="observer"),
        lambda: observer.pause("observed"),
        lambda: observer.prune(completed_after=timedelta(days=1)),
        lambda: observer.record_sample(),
    )
    assert observer.get_job(job_id).status is sq.JobStatus.PENDING


def test_the_operator_retries_cancels_pauses_recovers_and_prunes(roles):
    admin = admin_queue(roles, "operated")
    operator = with_tasks(roles.queue("operator"), "operated")
    broken, other_broken = admin.enqueue_many([{"task": "broken", "payload": {}} for _ in range(2)])
    for job in admin.claim("operated", worker_id="w", limit=2):
        admin.fail(job.id, job.claim_token, error="bad address")
    pending, more_pending, crashed = admin.enqueue_many([{"task": "send", "payload": {}} for _ in range(3)])
    with roles.admin.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET status = 'running', locked_at = now() - interval '1 hour', "
                          "locked_by = 'killed', attempts = 1, claim_token = 'gone' WHERE id = :id"), {"id": crashed})

    assert operator.retry_now(broken).status is sq.JobStatus.PENDING
    assert operator.retry_jobs(queue_name="operated").changed == (other_broken,)
    assert operator.cancel(pending).status is sq.JobStatus.CANCELLED
    assert set(operator.cancel_jobs(queue_name="operated", status="pending").changed) == {
        broken, other_broken, more_pending}
    assert operator.pause("operated").paused and not operator.resume("operated").paused
    assert operator.recover_expired(lease=60) == [crashed]
    with roles.admin.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET cancelled_at = now() - interval '30 days' "
                          "WHERE id = :id"), {"id": pending})
    assert operator.prune(cancelled_after=timedelta(days=7)).cancelled == 1
    assert pending not in rows(roles, "operated")
    assert isinstance(operator.record_sample(), int)
    assert "operated" in operator.stats().queues
    assert {check.name: check.verdict for check in Doctor(operator).run().checks}["claim plan"] is Verdict.OK

    refused(lambda: operator.enqueue("send", {}))


def test_the_worker_honours_limits_and_one_without_the_limits_grant_warns_and_claims_unlimited(roles, caplog):
    admin = admin_queue(roles, "limited")
    admin.enqueue_many([{"task": "send", "payload": {}, "group_key": "k"}] * 2)
    admin.set_limits("limited", group_concurrency=1)
    worker = with_tasks(roles.queue("worker"), "limited")
    assert len(worker.claim("limited", worker_id="granted", limit=5)) == 1  # the limit holds for the worker role

    roles.sql("REVOKE SELECT, UPDATE ON sqla_queue_jobs_limits FROM queue_worker")
    try:
        ungranted = with_tasks(roles.queue("worker"), "limited")
        with caplog.at_level("WARNING", logger="sqla_queue.limits"):
            assert len(ungranted.claim("limited", worker_id="ungranted", limit=5)) == 1  # the other job, unlimited
        assert "cannot read queue limits, so none are enforced" in caplog.text
    finally:
        roles.sql("GRANT SELECT, UPDATE ON sqla_queue_jobs_limits TO queue_worker")


def test_on_a_partitioned_table_a_worker_archives_with_delete_and_works_on_without_it(create_database):
    """The conversion copies the table's grants to its new parent; the archiver needs DELETE
    (the pruning grant), and a worker without it goes on working, unarchived, and says so."""
    from sqla_queue.ops.storage import partition_history
    from sqla_queue.services.archiving import Archiver

    made = Roles(create_database())
    try:
        made.run("roles", "producer", "worker", "logins")
        partition_history(made.admin)
        producer, worker = with_tasks(made.queue("producer"), "parted"), with_tasks(made.queue("worker"), "parted")
        job = producer.enqueue("send", {"to": "a"})
        summary = worker.worker(queues=["parted"], concurrency=1).run(until_empty=True)
        assert summary.completed == 1 and worker.get_job(job).status == sq.JobStatus.COMPLETED
        with pytest.raises(sq.PermissionDeniedError):
            Archiver(worker.core).run_once()
        made.run("worker: pruning")
        assert Archiver(worker.core).run_once().archived == 1
        with made.admin.connect() as conn:
            assert conn.execute(text("SELECT archived FROM sqla_queue_jobs WHERE id = :id"), {"id": job}).scalar()
    finally:
        made.drop()


def test_the_partitioned_revision_keeps_the_grants_both_ways(create_database):
    """The revision's swap copies the table's grants to the parent, and its way back copies
    those given on the parent meanwhile to the table again: the producer and the worker work
    on through both, and the DELETE granted while partitioned still lets the worker prune."""
    from sqla_queue import migrations

    made = Roles(create_database())
    try:
        made.run("roles", "producer", "worker", "logins")
        producer, worker = with_tasks(made.queue("producer"), "parted"), with_tasks(made.queue("worker"), "parted")
        with made.admin.connect() as conn:
            migrations.upgrade(conn, migrations.PARTITIONED_HEAD)
        made.run("worker: pruning")
        with made.admin.connect() as conn:
            migrations.downgrade(conn, migrations.PARTITIONED_BASE)
        job = producer.enqueue("send", {"to": "a"})
        summary = worker.worker(queues=["parted"], concurrency=1).run(until_empty=True)
        assert summary.completed == 1 and worker.get_job(job).status == sq.JobStatus.COMPLETED
        time.sleep(1.1)
        assert worker.prune(completed_after=timedelta(seconds=1)).completed == 1
    finally:
        made.drop()
