"""The partitioned layout (sqla_queue.ops.storage, docs/explanation/storage.md), against real
PostgreSQL: converting a populated table while workers run, archiving finished jobs where every
reader still finds them, and retention that drops whole days."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import ProgrammingError

import sqla_queue as sq
from sqla_queue.cli.root import main
from sqla_queue.ops.doctor import Doctor, Verdict
from sqla_queue.ops.storage import partition_history
from sqla_queue.services.archiving import History
from sqla_queue.sql import history as history_sql
from sqla_queue.sql.catalog import explain
from sqla_queue.states import JobStatus, state_of


@pytest.fixture
def db(create_database) -> Engine:
    engine = create_engine(create_database(), pool_size=10)
    yield engine
    engine.dispose()


def make_queue(engine: Engine) -> sq.Queue:
    queue = sq.Queue(engine, load_entrypoints=False)

    @queue.task(name="echo")
    def echo(payload, ctx):
        return {"echo": payload["n"]}

    @queue.task(name="boom", max_attempts=1)
    def boom(payload, ctx):
        raise RuntimeError("boom")

    return queue


def where(engine: Engine) -> dict[str, int]:
    """How many jobs each partition (or the plain table) holds."""
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT tableoid::regclass::text, count(*) FROM sqla_queue_jobs GROUP BY 1"))
        return dict(rows.all())


def relkind(engine: Engine) -> str:
    with engine.connect() as conn:
        return conn.execute(text("SELECT relkind FROM pg_class WHERE oid = 'sqla_queue_jobs'::regclass")).scalar()


def archive(queue: sq.Queue) -> int:
    history = History(queue.core.executor.table)
    return history.archive(queue.engine.begin)


def test_the_day_partitions_are_created_again_when_a_readers_locks_make_them_a_deadlocks_victim(db, monkeypatch):
    """The conversion's last step creates each state's day partitions, locking each state's
    history in turn, while a worker's statement on the now partitioned table takes shared locks
    on those histories in an order of its own. A real deadlock of that shape (a reader holding
    the cancelled history and then asking for the completed one, which the step holds) makes
    PostgreSQL abort the step: it is tried again and the conversion ends with every partition."""
    make_queue(db)
    original = History.ensure_days
    attempts: list[str] = []
    reader = db.connect()

    def ensure_days_against_a_reader(self, conn, today=None):
        if not attempts:
            reader.execute(text("LOCK TABLE sqla_queue_jobs_history_cancelled IN ACCESS SHARE MODE"))

            def then_the_completed_history():
                time.sleep(0.3)  # the step holds the completed history by now and waits for ours
                reader.execute(text("LOCK TABLE sqla_queue_jobs_history_completed IN ACCESS SHARE MODE"))
                reader.commit()

            threading.Thread(target=then_the_completed_history, daemon=True).start()
        try:
            created = original(self, conn, today)
        except Exception as exc:
            attempts.append(getattr(getattr(exc, "orig", None), "sqlstate", None) or type(exc).__name__)
            raise
        attempts.append("created")
        return created

    monkeypatch.setattr(History, "ensure_days", ensure_days_against_a_reader)
    try:
        assert partition_history(db) is True
    finally:
        reader.close()

    assert attempts == ["40P01", "created"]
    with db.connect() as conn:
        names = set(History(sq.Job.__table__).partitions(conn))
    today = datetime.now(UTC).date()
    assert {history_sql.day_partition_name(sq.Job.__table__, state_of(status), today)
            for status in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED)} <= names


def test_a_populated_table_is_converted_while_workers_drain_and_enqueues_go_on(db):
    """Every job enqueued before, during and after the conversion runs exactly once, ids keep
    ascending, and afterwards the finished ones are archived where readers still find them."""
    queue = make_queue(db)
    before = queue.enqueue_many([{"task": "echo", "payload": {"n": n}} for n in range(300)])
    worker = queue.worker(concurrency=4, poll_interval=0.05)
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    enqueued, stop = list(before), threading.Event()

    def feed():
        while not stop.is_set():
            enqueued.extend(queue.enqueue_many([{"task": "echo", "payload": {"n": n}} for n in range(20)]))
            time.sleep(0.01)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        time.sleep(0.3)
        assert partition_history(db) is True
        time.sleep(0.5)
        stop.set()
        feeder.join()
        deadline = time.monotonic() + 30
        while (queue.stats().queues["default"].pending + queue.stats().queues["default"].running
               and time.monotonic() < deadline):
            time.sleep(0.1)
    finally:
        # Also when something above failed: a worker left running in this test process would
        # go on logging into the next tests' captured logs.
        stop.set()
        worker.stop()
        runner.join(timeout=30)

    assert relkind(db) == "p"
    assert len(set(enqueued)) == len(enqueued) and enqueued == sorted(enqueued)
    with db.connect() as conn:
        rows = conn.execute(text("SELECT id, status, attempts FROM sqla_queue_jobs")).all()
    assert sorted(r.id for r in rows) == sorted(enqueued)
    assert {(r.status, r.attempts) for r in rows} == {("completed", 1)}
    archive(queue)
    placed = where(db)
    assert set(placed) <= {"sqla_queue_jobs_live", *(f"sqla_queue_jobs_history_completed_p{d}" for d in _days())}
    assert sum(n for name, n in placed.items() if "history" in name) >= len(enqueued) - len(before)
    job = queue.get_job(enqueued[-1])
    assert job.status == JobStatus.COMPLETED and job.result == {"echo": 19}
    assert queue.stats().queues["default"].completed == len(enqueued)


def _days() -> list[str]:
    today = datetime.now(UTC).date()
    return [(today + timedelta(days=d)).strftime("%Y%m%d") for d in range(-1, 3)]


def test_the_claim_reads_only_the_live_partition(db):
    partition_history(db)
    with db.connect() as conn:
        plan = "\n".join(conn.execute(text(
            "EXPLAIN SELECT id FROM sqla_queue_jobs WHERE queue_name = 'q' AND status = 'pending' "
            "ORDER BY priority DESC, run_at, id LIMIT 5 FOR UPDATE SKIP LOCKED")).scalars())
    assert "sqla_queue_jobs_live" in plan and "history" not in plan


def test_archived_jobs_are_found_by_every_reader_and_their_keys_are_free_again(db):
    partition_history(db)
    queue = make_queue(db)
    done = queue.enqueue("echo", {"n": 7}, idempotency_key="report-7")
    failed = queue.enqueue("boom", {"n": 1})
    queue.worker(concurrency=2).run(until_empty=True)
    archive(queue)
    assert where(db) == {"sqla_queue_jobs_history_completed_p" + _days()[1]: 1,
                         "sqla_queue_jobs_history_failed_p" + _days()[1]: 1}
    assert queue.get_job(done).result == {"echo": 7}
    assert [j.id for j in queue.list_jobs(status="failed").jobs] == [failed]
    assert queue.enqueue("echo", {"n": 8}, idempotency_key="report-7") != done  # the key left with the job
    again = queue.enqueue("echo", {"n": 9}, idempotency_key="report-7")  # ...and is held by the new one
    assert again == queue.enqueue("echo", {"n": 10}, idempotency_key="report-7")


def test_a_retried_failed_job_leaves_the_history_and_runs_again(db):
    partition_history(db)
    queue = make_queue(db)
    failed = queue.enqueue("boom", {"n": 1})
    queue.worker(concurrency=1).run(until_empty=True)
    archive(queue)
    assert queue.retry_now(failed).status == JobStatus.PENDING
    assert where(db).get("sqla_queue_jobs_live") == 1
    assert queue.get_job(failed).status == JobStatus.PENDING


def _finished_days_ago(db: Engine, queue: sq.Queue, days: int, count: int, *, dependents: int = 0) -> str:
    """`count` completed jobs archived in the partition of the day `days` ago (made for it)."""
    table = queue.core.executor.table
    day = datetime.now(UTC).date() - timedelta(days=days)
    state = state_of(JobStatus.COMPLETED)
    with db.begin() as conn:
        conn.execute(history_sql.create_day_partition(conn, table, state, day))
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs (queue_name, task, payload, status, completed_at, archived, dependents) "
            "SELECT 'default', 'echo', '{}', 'completed', :at, true, :dependents FROM generate_series(1, :n)"),
            {"at": datetime(day.year, day.month, day.day, 12, tzinfo=UTC), "n": count, "dependents": dependents})
    return history_sql.day_partition_name(table, state, day)


def test_retention_drops_whole_expired_days_and_counts_their_jobs(db):
    partition_history(db)
    queue = make_queue(db)
    old = _finished_days_ago(db, queue, 10, 500)
    recent = _finished_days_ago(db, queue, 3, 200)
    result = queue.prune(completed_after=timedelta(days=7))
    assert result.completed == 500
    names = set(History(queue.core.executor.table).partitions(db.connect()))
    assert old not in names and recent in names
    assert where(db) == {recent: 200}


def test_retention_keeps_a_day_whose_job_an_active_job_still_depends_on(db):
    partition_history(db)
    queue = make_queue(db)
    old = _finished_days_ago(db, queue, 10, 3, dependents=1)
    with db.begin() as conn:
        parent = conn.execute(text(f"SELECT min(id) FROM {old}")).scalar()
        child = conn.execute(text("INSERT INTO sqla_queue_jobs (queue_name, task, payload, status, waiting_on) "
                                  "VALUES ('default', 'echo', '{}', 'waiting', 1) RETURNING id")).scalar()
        conn.execute(text("INSERT INTO sqla_queue_jobs_dependencies (depends_on, job_id) VALUES (:p, :c)"),
                     {"p": parent, "c": child})
    assert queue.prune(completed_after=timedelta(days=7)).completed == 0
    assert old in History(queue.core.executor.table).partitions(db.connect())


def test_converting_twice_does_nothing_and_the_command_line_says_so(db):
    runner = CliRunner()
    env = {"SQLA_QUEUE_DATABASE_URL": db.url.render_as_string(hide_password=False)}
    first = runner.invoke(main, ["db", "partition-history"], env=env)
    second = runner.invoke(main, ["db", "partition-history"], env=env)
    assert (first.exit_code, second.exit_code) == (0, 0), first.output + second.output
    assert first.output.startswith("job table partitioned")
    assert second.output == "job table already partitioned: nothing to do\n"
    assert relkind(db) == "p"


def test_doctor_reads_the_dead_tuples_of_the_live_partition(db):
    partition_history(db)
    queue = make_queue(db)
    with db.connect() as conn:
        check = Doctor(queue).check_dead_tuples(conn)
    assert check.verdict is not Verdict.FAIL, check


def test_the_doctors_vacuum_advice_names_the_live_partition_and_runs_as_given(db):
    """Storage parameters cannot be set on a partitioned parent: the advice must name the
    partition whose dead tuples it counted, and its ALTER TABLE must run."""
    import re

    partition_history(db)
    queue = make_queue(db)
    with db.connect() as conn:
        conn.execute(text("ALTER TABLE sqla_queue_jobs_live SET (autovacuum_enabled = false)"))
        conn.execute(text("INSERT INTO sqla_queue_jobs (queue_name, task, payload) "
                          "SELECT 'default', 'echo', '{}' FROM generate_series(1, 20000)"))
        conn.commit()
        conn.execute(text("DELETE FROM sqla_queue_jobs"))
        conn.commit()
        conn.execute(text("SELECT pg_stat_force_next_flush()"))
        conn.execute(text("SELECT 1"))  # counts reach shared stats when the session is idle
    with db.connect() as conn:
        check = Doctor(queue).check_dead_tuples(conn)
    assert check.verdict is Verdict.FAIL, check
    advice = re.search(r"ALTER TABLE (\S+) SET \([^)]*\)", check.hint)
    assert advice is not None and advice.group(1) == "sqla_queue_jobs_live", check.hint
    with db.begin() as conn:
        conn.execute(text(advice.group(0)))


def test_downgrading_past_the_column_is_refused_once_partitioned(db):
    from sqla_queue import migrations

    partition_history(db)
    with db.connect() as conn, pytest.raises(ProgrammingError, match="partition key"):
        migrations.downgrade(conn, "sqlaq_0013")


def _relations_planned(engine: Engine, statement, params: dict) -> set[str]:
    with engine.connect() as conn:
        [[plan]] = conn.execute(explain(statement), params).all()
        conn.rollback()
    plan = plan if isinstance(plan, list) else json.loads(plan)
    found, todo = set(), [plan[0]["Plan"]]
    while todo:
        node = todo.pop()
        found.update(node[key] for key in ("Relation Name",) if key in node)
        todo.extend(node.get("Plans", []))
    return found


HELD = {"job_ids": [1], "tokens": ["t"], "results": [None], "lease": timedelta(seconds=30)}
WORKER_STATEMENTS = {
    "claim": {"queue": "default", "limit": 5, "worker_id": "w", "token": "t", "lease": timedelta(seconds=30)},
    "renew": HELD,
}


@pytest.mark.parametrize("name", sorted(WORKER_STATEMENTS))
def test_the_worker_statements_plan_only_the_live_partition_however_many_days_are_kept(db, name):
    """The claim and lease renewal find their rows by id: without saying the row is live, each
    would probe (and lock) every day partition of the history."""
    partition_history(db)
    queue = make_queue(db)
    for days in range(2, 9):
        _finished_days_ago(db, queue, days, 1)
    statement = getattr(queue.core.executor.statements, name)
    planned = _relations_planned(db, statement, WORKER_STATEMENTS[name])
    assert "sqla_queue_jobs_live" in planned
    assert not [relation for relation in planned if relation.startswith("sqla_queue_jobs_history")]
