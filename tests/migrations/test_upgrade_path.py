"""Upgrading a queue that is in use: jobs survive, interrupted runs can be re-run, and the
revisions never end up inside (or waiting on) the caller's transaction."""

from __future__ import annotations

from datetime import timedelta

import pytest
from alembic.util import CommandError
from migration_helpers import (
    HEAD_ID,
    PREVIOUS_ID,
    downgrade,
    schema_catalog,
    stamped,
    table_catalog,
    upgrade,
)
from sqlalchemy import Engine, MetaData, Table, insert, select, text
from sqlalchemy.exc import IntegrityError

import sqla_queue as sq
from sqla_queue import migrations

REVISION_1_JOBS = [
    {"queue_name": "default", "task": "send_email", "payload": {"to": "a@b.c"}},
    {"queue_name": "default", "task": "send_email", "payload": {"n": 2}, "status": "completed",
     "attempts": 1, "completed_at": text("now()")},
    {"queue_name": "images", "task": "resize", "payload": {}, "status": "failed",
     "attempts": 5, "last_error": "boom", "idempotency_key": "k1"},
]


def reflected_jobs(engine: Engine) -> Table:
    """The table as the database has it: revision 1 has no failed_at, unlike the models."""
    return Table("sqla_queue_jobs", MetaData(), autoload_with=engine)


def enqueued_at_this_revision(engine: Engine, payload: dict | None = None) -> int:
    """A pending job inserted through the table as this revision has it (the code's enqueue
    writes the columns of the head revision)."""
    with engine.begin() as conn:
        return conn.execute(insert(reflected_jobs(engine)).values(
            queue_name="default", task="send_email", payload=payload or {}).returning(text("id"))).scalar_one()


def status_at_this_revision(engine: Engine, job_id: int) -> str:
    table = reflected_jobs(engine)
    with engine.connect() as conn:
        return conn.execute(select(table.c.status).where(table.c.id == job_id)).scalar_one()


def all_rows(engine: Engine, table: Table) -> list[dict]:
    with engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(select(table).order_by(table.c.id))]


def test_upgrading_from_revision_1_keeps_existing_jobs_and_they_keep_working(empty_engine):
    upgrade(empty_engine, "sqlaq_0001")
    old_table = reflected_jobs(empty_engine)
    with empty_engine.begin() as conn:
        for job in REVISION_1_JOBS:
            conn.execute(insert(old_table).values(**job))
    before = all_rows(empty_engine, old_table)

    upgrade(empty_engine, "sqlaq_0002")

    after = all_rows(empty_engine, reflected_jobs(empty_engine))
    assert [{k: v for k, v in row.items() if k != "failed_at"} for row in after] == before
    assert [row["failed_at"] for row in after] == [None, None, None]

    upgrade(empty_engine)  # the code of this version needs the whole branch
    queue = sq.Queue(empty_engine, load_entrypoints=False)
    [job] = queue.claim("default", worker_id="w1")
    assert job.id == before[0]["id"]
    assert queue.fail(job.id, job.claim_token, error="gave up")
    assert queue.get_job(job.id).failed_at is not None


def test_revision_2_can_be_rerun_after_an_interrupted_index_build(make_engine):
    """The autocommit block commits the new column before the revision is stamped, and a failed
    CONCURRENTLY build leaves an INVALID index of the same name: a re-run must cope with both."""
    interrupted, clean = make_engine(), make_engine()
    upgrade(clean)
    upgrade(interrupted, "sqlaq_0001")
    table = reflected_jobs(interrupted)
    with interrupted.begin() as conn:
        conn.execute(insert(table), [{"queue_name": "q", "task": "t", "payload": {}}] * 2)
        conn.execute(text("ALTER TABLE sqla_queue_jobs ADD COLUMN failed_at timestamptz"))
    with interrupted.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        with pytest.raises(IntegrityError):  # duplicate queue_name: the build fails half-way
            conn.execute(text(
                "CREATE UNIQUE INDEX CONCURRENTLY sqla_queue_jobs_failed_at_idx ON sqla_queue_jobs (queue_name)"
            ))
    assert table_catalog(interrupted).indexes["sqla_queue_jobs_failed_at_idx"][1] is False
    assert stamped(interrupted) == {"sqlaq_0001"}

    upgrade(interrupted)

    assert schema_catalog(interrupted) == schema_catalog(clean)
    assert stamped(interrupted) == {HEAD_ID}


def test_upgrade_inside_an_untouched_begin_block_runs_beside_it(empty_engine):
    """``with engine.begin() as conn`` has not sent BEGIN yet: nothing to wait on."""
    with empty_engine.begin() as conn:
        migrations.upgrade(conn)
    assert stamped(empty_engine) == {HEAD_ID}


def test_upgrade_refuses_a_connection_whose_transaction_reached_the_server(empty_engine):
    """Such a transaction may hold locks or a snapshot that the DDL and CONCURRENTLY would wait
    on forever, from the same thread: refusing beats hanging."""
    with empty_engine.connect() as conn:
        conn.execute(text("SELECT 1"))
        with pytest.raises(CommandError, match="open transaction"):
            migrations.upgrade(conn)
    assert stamped(empty_engine) == set()


def test_current_reads_without_leaving_a_transaction_open(empty_engine):
    with empty_engine.connect() as conn:
        assert migrations.current(conn) is None
        assert not conn.in_transaction()
        migrations.upgrade(conn, "sqlaq_0001")
        assert migrations.current(conn) == "sqlaq_0001"
        migrations.upgrade(conn)
        assert migrations.current(conn) == HEAD_ID
        migrations.downgrade(conn, migrations.PREVIOUS)
        assert migrations.current(conn) == PREVIOUS_ID


def test_upgrading_a_live_revision_4_queue_to_job_control_keeps_its_jobs_claimable_by_priority(empty_engine):
    upgrade(empty_engine, "sqlaq_0004")
    old_table = reflected_jobs(empty_engine)
    with empty_engine.begin() as conn:
        for n in range(3):
            conn.execute(insert(old_table).values(queue_name="default", task="send_email", payload={"n": n}))
    before = all_rows(empty_engine, old_table)

    upgrade(empty_engine, "sqlaq_0005")

    after = all_rows(empty_engine, reflected_jobs(empty_engine))
    assert [{k: row[k] for k in before[0]} for row in after] == before
    assert {(row["priority"], row["snoozes"], row["result"], row["cancelled_at"]) for row in after} == {(0, 0, None, None)}
    upgrade(empty_engine)  # today's code needs today's schema
    queue = sq.Queue(empty_engine, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")
    urgent = queue.enqueue("send_email", {"n": "urgent"}, priority=10)
    assert [job.id for job in queue.claim("default", worker_id="w", limit=2)] == [before[0]["id"], urgent]


def test_revision_7_adds_meta_to_live_jobs_and_its_downgrade_keeps_them(empty_engine):
    upgrade(empty_engine, "sqlaq_0006")
    old_table = reflected_jobs(empty_engine)
    with empty_engine.begin() as conn:
        conn.execute(insert(old_table).values(queue_name="default", task="send_email", payload={"n": 1}))
    before = all_rows(empty_engine, old_table)

    upgrade(empty_engine, "sqlaq_0007")
    assert "meta" in reflected_jobs(empty_engine).c
    upgrade(empty_engine)  # today's claim needs today's schema
    queue = sq.Queue(empty_engine, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")
    traced = queue.enqueue("send_email", {"n": 2}, meta={"trace_id": "t"})
    [old_job, new_job] = queue.claim("default", worker_id="w", limit=2)
    assert (old_job.id, old_job.meta, new_job.id, new_job.meta) == (before[0]["id"], None, traced, {"trace_id": "t"})

    downgrade(empty_engine, "sqlaq_0006")
    rows = all_rows(empty_engine, reflected_jobs(empty_engine))
    assert "meta" not in rows[0] and [row["id"] for row in rows] == [before[0]["id"], traced]
    upgrade(empty_engine)  # and up again: the column comes back empty
    assert {row["meta"] for row in all_rows(empty_engine, reflected_jobs(empty_engine))} == {None}


def test_revision_8_leaves_running_jobs_claimed_before_it_to_the_fallback_lease(empty_engine):
    """A job running when sqlaq_0008 is applied has no lease end: recovery judges it by the
    lease it is given, as before. Jobs claimed afterwards carry their holder's. Downgrade drops
    the column and its index and keeps the jobs."""
    upgrade(empty_engine, "sqlaq_0007")
    old_table = reflected_jobs(empty_engine)
    with empty_engine.begin() as conn:
        conn.execute(insert(old_table).values(
            queue_name="default", task="send_email", payload={"n": 1}, status="running", attempts=1,
            locked_by="old-worker", claim_token="old", locked_at=text("clock_timestamp() - interval '10 minutes'")))
    before = all_rows(empty_engine, old_table)

    upgrade(empty_engine, "sqlaq_0008")
    [row] = all_rows(empty_engine, reflected_jobs(empty_engine))
    assert {k: row[k] for k in before[0]} == before[0] and row["lease_expires_at"] is None
    upgrade(empty_engine)  # today's recovery needs today's schema; the old claim stays as it was
    queue = sq.Queue(empty_engine, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")
    fresh = enqueued_at_this_revision(empty_engine, payload={"n": 2})
    [claimed] = queue.claim("default", worker_id="new-worker", lease=timedelta(seconds=30))
    assert claimed.id == fresh
    assert queue.recover_expired(lease=timedelta(minutes=11)) == []
    assert queue.recover_expired(lease=timedelta(minutes=9)) == [row["id"]]  # only the old claim
    assert status_at_this_revision(empty_engine, fresh) == "running"

    downgrade(empty_engine, "sqlaq_0007")
    rows = all_rows(empty_engine, reflected_jobs(empty_engine))
    assert "lease_expires_at" not in rows[0] and [r["id"] for r in rows] == [row["id"], fresh]
    with empty_engine.connect() as conn:
        assert conn.execute(text("SELECT to_regclass('sqla_queue_jobs_running_expiry_idx')")).scalar() is None
    upgrade(empty_engine)  # and up again: the column comes back empty
    assert {r["lease_expires_at"] for r in all_rows(empty_engine, reflected_jobs(empty_engine))} == {None}


def test_revision_9_indexes_only_the_running_jobs_without_a_lease_end(empty_engine):
    """After sqlaq_0009 a claim enters one running-jobs index, not two: the index by lease start
    keeps only the rows claimed before sqlaq_0008, which recovery still finds by the fallback
    lease. Downgrade brings the old index back."""
    upgrade(empty_engine, "sqlaq_0007")
    with empty_engine.begin() as conn:
        conn.execute(insert(reflected_jobs(empty_engine)).values(
            queue_name="default", task="send_email", payload={}, status="running", attempts=1,
            locked_by="old-worker", claim_token="old", locked_at=text("clock_timestamp() - interval '10 minutes'")))
    upgrade(empty_engine, "sqlaq_0009")
    unleased = "sqla_queue_jobs_running_unleased_idx"
    indexes = _index_definitions(empty_engine)
    assert "sqla_queue_jobs_running_lease_idx" not in indexes
    assert indexes[unleased].endswith("WHERE ((status = 'running'::text) AND (lease_expires_at IS NULL))"), indexes
    upgrade(empty_engine)  # today's recovery needs today's schema; the index stays as sqlaq_0009 made it
    queue = sq.Queue(empty_engine, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")
    fresh = enqueued_at_this_revision(empty_engine)
    [claimed] = queue.claim("default", worker_id="new-worker", lease=timedelta(seconds=30))
    assert claimed.id == fresh
    [old_id] = queue.recover_expired(lease=timedelta(minutes=9))
    assert old_id != fresh and status_at_this_revision(empty_engine, fresh) == "running"

    downgrade(empty_engine, "sqlaq_0008")
    indexes = _index_definitions(empty_engine)
    assert "sqla_queue_jobs_running_lease_idx" in indexes and unleased not in indexes


def _index_definitions(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'sqla_queue_jobs'"))
        return dict(rows.all())


def test_revision_5_can_be_rerun_after_an_interrupted_claim_index_swap(make_engine):
    """Its autocommit block commits step by step: interrupted after building the new claim index
    (or after the rename), a re-run must still end in exactly the head schema."""
    interrupted, clean = make_engine(), make_engine()
    upgrade(clean)
    upgrade(interrupted)
    with interrupted.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("CREATE INDEX sqla_queue_jobs_pending_claim_idx_building ON sqla_queue_jobs (queue_name)"))
    with interrupted.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'sqlaq_0004'"))

    upgrade(interrupted)

    assert schema_catalog(interrupted) == schema_catalog(clean)
    assert stamped(interrupted) == {HEAD_ID}


def test_downgrading_job_control_deletes_cancelled_jobs_the_old_schema_cannot_hold(empty_engine):
    upgrade(empty_engine)
    queue = sq.Queue(empty_engine, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")
    kept, cancelled = queue.enqueue("send_email", {}), queue.enqueue("send_email", {})
    with empty_engine.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET status = 'cancelled', cancelled_at = now() WHERE id = :id"),
                     {"id": cancelled})

    downgrade(empty_engine, "sqlaq_0004")

    assert [row["id"] for row in all_rows(empty_engine, reflected_jobs(empty_engine))] == [kept]
    assert stamped(empty_engine) == {"sqlaq_0004"}


def test_revision_10_adds_the_worker_registry_beside_live_jobs_and_its_downgrade_drops_it(empty_engine):
    """sqlaq_0010 is one new table: the jobs are untouched, a worker registers in it at once,
    and downgrade removes it (and only it)."""
    upgrade(empty_engine, "sqlaq_0009")
    with empty_engine.begin() as conn:
        conn.execute(insert(reflected_jobs(empty_engine)).values(queue_name="default", task="send_email", payload={}))
    before = all_rows(empty_engine, reflected_jobs(empty_engine))

    upgrade(empty_engine, "sqlaq_0010")
    assert all_rows(empty_engine, reflected_jobs(empty_engine)) == before
    assert "sqla_queue_jobs_workers" in schema_catalog(empty_engine)
    upgrade(empty_engine)  # this package's workers need the head revision (the changelog's rule)
    queue = sq.Queue(empty_engine, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")
    assert queue.worker(queues=["default"]).run(until_empty=True).completed == 1
    assert queue.workers() == []  # it registered, and removed its row on the way out

    downgrade(empty_engine, "sqlaq_0009")
    with empty_engine.connect() as conn:
        assert conn.execute(text("SELECT to_regclass('sqla_queue_jobs_workers')")).scalar() is None
    assert [row["id"] for row in all_rows(empty_engine, reflected_jobs(empty_engine))] == [before[0]["id"]]
    upgrade(empty_engine)
    assert stamped(empty_engine) == {HEAD_ID}


def test_revision_11_adds_group_keys_and_limits_beside_live_jobs_and_its_downgrade_removes_them(empty_engine):
    """sqlaq_0011: existing jobs get no group key and keep working; grouped jobs enter the two
    partial indexes; downgrade drops the column, both indexes and both tables, keeping the jobs."""
    upgrade(empty_engine, "sqlaq_0010")
    old = enqueued_at_this_revision(empty_engine)

    upgrade(empty_engine, "sqlaq_0011")
    jobs = reflected_jobs(empty_engine)
    with empty_engine.begin() as conn:
        grouped = conn.execute(insert(jobs).values(queue_name="default", task="send_email", payload={},
                                                   group_key="tenant-1").returning(jobs.c.id)).scalar_one()
    keys = {row["id"]: row["group_key"] for row in all_rows(empty_engine, reflected_jobs(empty_engine))}
    assert (keys[old], keys[grouped]) == (None, "tenant-1")
    indexes = _index_definitions(empty_engine)
    assert indexes["sqla_queue_jobs_pending_group_idx"].endswith(
        "WHERE ((status = 'pending'::text) AND (group_key IS NOT NULL))")
    assert indexes["sqla_queue_jobs_running_group_idx"].endswith(
        "WHERE ((status = 'running'::text) AND (group_key IS NOT NULL))")
    assert {"sqla_queue_jobs_limits", "sqla_queue_jobs_group_rates"} <= set(schema_catalog(empty_engine))

    downgrade(empty_engine, "sqlaq_0010")
    rows = all_rows(empty_engine, reflected_jobs(empty_engine))
    assert [r["id"] for r in rows] == [old, grouped] and "group_key" not in rows[0]
    indexes = _index_definitions(empty_engine)
    assert not {"sqla_queue_jobs_pending_group_idx", "sqla_queue_jobs_running_group_idx"} & set(indexes)
    with empty_engine.connect() as conn:
        assert conn.execute(text("SELECT to_regclass('sqla_queue_jobs_limits'), "
                                 "to_regclass('sqla_queue_jobs_group_rates')")).one() == (None, None)
    upgrade(empty_engine)
    assert stamped(empty_engine) == {HEAD_ID}


def test_revision_12_adds_waiting_jobs_beside_live_ones_and_its_downgrade_cancels_them(empty_engine):
    """sqlaq_0012: existing jobs get no dependencies and keep working; a waiting job holds its
    idempotency key (the rebuilt active-key index); downgrade cancels waiting jobs (the earlier
    schema has no such state) and drops the columns and the dependencies table."""
    upgrade(empty_engine, "sqlaq_0011")
    old = enqueued_at_this_revision(empty_engine)
    upgrade(empty_engine, "sqlaq_0012")
    assert _index_definitions(empty_engine)["sqla_queue_jobs_active_key_idx"].endswith(
        "WHERE (status = ANY (ARRAY['waiting'::text, 'pending'::text, 'running'::text]))")

    upgrade(empty_engine)  # today's code writes today's columns
    queue = sq.Queue(empty_engine, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")
    waiting = queue.enqueue("send_email", {}, depends_on=[old])
    assert (queue.get_job(old).status.value, queue.get_job(waiting).status.value) == ("pending", "waiting")

    downgrade(empty_engine, "sqlaq_0011")
    rows = {r["id"]: r for r in all_rows(empty_engine, reflected_jobs(empty_engine))}
    assert rows[waiting]["status"] == "cancelled" and "waiting_on" not in rows[old]
    assert _index_definitions(empty_engine)["sqla_queue_jobs_active_key_idx"].endswith(
        "WHERE (status = ANY (ARRAY['pending'::text, 'running'::text]))")
    with empty_engine.connect() as conn:
        assert conn.execute(text("SELECT to_regclass('sqla_queue_jobs_dependencies')")).scalar() is None
    upgrade(empty_engine)
    assert stamped(empty_engine) == {HEAD_ID}


def test_revision_13_gives_turns_to_a_fair_queues_jobs_from_before_it_and_its_downgrade_drops_them(empty_engine):
    """sqlaq_0013: jobs enqueued before it have no turn; making the queue fair gives them
    theirs, and they are claimed key by key; downgrade drops the column and its two indexes."""
    upgrade(empty_engine, "sqlaq_0012")
    before = [enqueued_at_this_revision(empty_engine, {"n": n}) for n in range(3)]
    with empty_engine.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET group_key = 'old'"))

    upgrade(empty_engine, "sqlaq_0013")
    turns_index = {"sqla_queue_jobs_pending_fair_idx", "sqla_queue_jobs_pending_key_turn_idx"}
    assert turns_index <= set(_index_definitions(empty_engine))
    upgrade(empty_engine)  # the library reads the head's columns
    queue = sq.Queue(empty_engine, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")
    assert {queue.get_job(job_id).status.value for job_id in before} == {"pending"}
    queue.set_limits("default", fair=True)
    new = queue.enqueue_many([{"task": "send_email", "payload": {}, "group_key": "new"}] * 3)
    with empty_engine.connect() as conn:
        turns = dict(conn.execute(text("SELECT id, fair_tag FROM sqla_queue_jobs")).all())
    assert [turns[job_id] for job_id in before] == [0, 1, 2] and [turns[job_id] for job_id in new] == [0, 1, 2]
    assert {job.id for job in queue.claim("default", worker_id="w", limit=2)} == {before[0], new[0]}

    downgrade(empty_engine, "sqlaq_0012")
    assert not turns_index & set(_index_definitions(empty_engine))
    assert "fair_tag" not in all_rows(empty_engine, reflected_jobs(empty_engine))[0]
    upgrade(empty_engine)
    assert stamped(empty_engine) == {HEAD_ID}


def test_revision_14_adds_archived_false_on_every_job_and_its_downgrade_drops_it(empty_engine):
    """sqlaq_0014: a catalog-only column, false on the jobs enqueued before it; the library at
    head reads and retries them; downgrade drops it (refused by PostgreSQL once the table is
    partitioned by it: tests/ops/test_storage.py)."""
    upgrade(empty_engine, "sqlaq_0013")
    before = [enqueued_at_this_revision(empty_engine, {"n": n}) for n in range(2)]
    upgrade(empty_engine, "sqlaq_0014")
    with empty_engine.connect() as conn:
        assert conn.execute(text("SELECT array_agg(DISTINCT archived) FROM sqla_queue_jobs")).scalar() == [False]
    queue = sq.Queue(empty_engine, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")
    assert {queue.get_job(job_id).status.value for job_id in before} == {"pending"}
    downgrade(empty_engine, "sqlaq_0013")
    assert "archived" not in all_rows(empty_engine, reflected_jobs(empty_engine))[0]
    upgrade(empty_engine)
    assert stamped(empty_engine) == {HEAD_ID}


def _index_entries(engine: Engine, name: str) -> float:
    """The entries an index holds, as its build (or the last VACUUM) counted them."""
    with engine.connect() as conn:
        return conn.execute(text("SELECT reltuples FROM pg_class WHERE relname = :name"), {"name": name}).scalar()


def test_revision_15_leaves_keyless_jobs_out_of_the_active_key_index_and_its_downgrade_puts_them_back(empty_engine):
    """sqlaq_0015: the active-key index holds the keyed active jobs only, and still refuses a
    second active job with a key; the waiting jobs get their own index. Downgrade restores the
    index of every active job and drops the waiting one."""
    upgrade(empty_engine, "sqlaq_0014")
    for _ in range(3):
        enqueued_at_this_revision(empty_engine)
    with empty_engine.begin() as conn:
        conn.execute(insert(reflected_jobs(empty_engine)).values(
            queue_name="default", task="send_email", payload={}, idempotency_key="k1"))
    key_index, waiting_index = "sqla_queue_jobs_active_key_idx", "sqla_queue_jobs_waiting_idx"

    upgrade(empty_engine, "sqlaq_0015")
    indexes = _index_definitions(empty_engine)
    assert indexes[key_index].endswith("WHERE ((idempotency_key IS NOT NULL) AND "
                                       "(status = ANY (ARRAY['waiting'::text, 'pending'::text, 'running'::text])))")
    assert indexes[waiting_index].endswith("(queue_name) WHERE (status = 'waiting'::text)")
    assert _index_entries(empty_engine, key_index) == 1
    with pytest.raises(IntegrityError), empty_engine.begin() as conn:
        conn.execute(insert(reflected_jobs(empty_engine)).values(
            queue_name="default", task="send_email", payload={}, idempotency_key="k1"))

    downgrade(empty_engine, "sqlaq_0014")
    indexes = _index_definitions(empty_engine)
    assert indexes[key_index].endswith("WHERE (status = ANY (ARRAY['waiting'::text, 'pending'::text, 'running'::text]))")
    assert waiting_index not in indexes
    assert _index_entries(empty_engine, key_index) == 4
    upgrade(empty_engine)
    assert stamped(empty_engine) == {HEAD_ID}
