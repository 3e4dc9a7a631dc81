"""The opt-in ``sqla_queue_partitioned`` branch (docs/explanation/storage.md): the partitioned
layout as an Alembic revision, both ways, on a populated table with a worker draining it and
enqueues going on, through the library, the CLI and a host's own ``alembic upgrade heads``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from migration_helpers import HostApp, Shell, stamped
from sqlalchemy import Engine, create_engine, text

import sqla_queue as sq
from sqla_queue import migrations
from sqla_queue.services.archiving import History

PART = "sqlaq_part_0001"


@pytest.fixture
def engine(create_database) -> Iterator[Engine]:
    engine = create_engine(create_database(), pool_size=10)
    yield engine
    engine.dispose()


def relkind(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return conn.execute(text("SELECT relkind FROM pg_class WHERE oid = to_regclass('sqla_queue_jobs')")).scalar()


def rows(engine: Engine) -> list:
    with engine.connect() as conn:
        return conn.execute(text("SELECT id, status, attempts, archived, tableoid::regclass::text AS place "
                                 "FROM sqla_queue_jobs ORDER BY id")).all()


class Traffic:
    """A worker draining the queue and a thread enqueuing 20 jobs every 10 ms, until `stop`."""

    def __init__(self, engine: Engine) -> None:
        self.queue = sq.Queue(engine, load_entrypoints=False)
        self.queue.task(name="echo")(lambda payload, ctx: {"echo": payload["n"]})
        self.enqueued = list(self.queue.enqueue_many([{"task": "echo", "payload": {"n": n}} for n in range(300)]))
        self.worker = self.queue.worker(concurrency=4, poll_interval=0.05)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self.worker.run, daemon=True),
                         threading.Thread(target=self._feed, daemon=True)]
        for thread in self._threads:
            thread.start()

    def _feed(self) -> None:
        while not self._stop.is_set():
            self.enqueued.extend(self.queue.enqueue_many([{"task": "echo", "payload": {"n": n}} for n in range(20)]))
            time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        self._threads[1].join()
        deadline = time.monotonic() + 30
        while self._active() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.worker.stop()
        self._threads[0].join(timeout=30)

    def _active(self) -> int:
        counts = self.queue.stats().queues["default"]
        return counts.pending + counts.running


def test_the_revision_converts_a_populated_table_and_back_while_a_worker_drains_it(engine):
    """Every job enqueued before, between and after the two conversions runs exactly once; the
    jobs archived while partitioned come back to the plain table, found by id, and ids go on
    ascending through both identity hand-overs."""
    traffic = Traffic(engine)
    time.sleep(0.3)
    with engine.connect() as conn:
        migrations.upgrade(conn, migrations.PARTITIONED_HEAD)
        assert (migrations.current(conn), migrations.partitioned_revision(conn)) == ("sqlaq_0015", PART)
    assert relkind(engine) == "p"
    time.sleep(0.5)
    archived = History(traffic.queue.core.executor.table).archive(engine.begin)
    assert archived > 0
    with engine.connect() as conn:
        migrations.downgrade(conn, migrations.PARTITIONED_BASE)
        assert (migrations.current(conn), migrations.partitioned_revision(conn)) == ("sqlaq_0015", None)
    time.sleep(0.3)
    traffic.stop()

    assert relkind(engine) == "r" and stamped(engine) == {"sqlaq_0015"}
    found = rows(engine)
    assert [r.id for r in found] == sorted(traffic.enqueued)
    assert traffic.enqueued == sorted(traffic.enqueued) and len(set(traffic.enqueued)) == len(traffic.enqueued)
    assert {(r.status, r.attempts, r.archived, r.place) for r in found} == {("completed", 1, False, "sqla_queue_jobs")}
    with engine.connect() as conn:
        left = conn.execute(text("SELECT count(*) FROM pg_class WHERE relname LIKE 'sqla_queue_jobs\\_history%'")).scalar()
    assert left == 0
    assert traffic.queue.get_job(traffic.enqueued[0]).result == {"echo": 0}


def test_a_table_converted_by_the_command_is_only_recorded_and_downgrading_the_main_branch_undoes_it(engine):
    from sqla_queue.ops.storage import partition_history

    assert partition_history(engine) is True
    with engine.connect() as conn:
        migrations.upgrade(conn, migrations.PARTITIONED_HEAD)
        assert migrations.partitioned_revision(conn) == PART
        migrations.downgrade(conn, "sqlaq_0013")  # Alembic undoes the dependent branch first
        assert (migrations.current(conn), migrations.partitioned_revision(conn)) == ("sqlaq_0013", None)
    assert relkind(engine) == "r"


def live_indexes(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(text("SELECT indexname, indexdef FROM pg_indexes "
                                      "WHERE tablename = 'sqla_queue_jobs_live'")).all())


def test_a_revision_that_builds_indexes_builds_them_on_the_live_partition_both_ways(engine):
    """sqlaq_0015 on a table partitioned at sqlaq_0014: an index cannot be built CONCURRENTLY
    on the partitioned parent, so the revision builds it on the live partition that holds the
    others, and its downgrade restores the earlier one there, the layout untouched."""
    with engine.connect() as conn:
        migrations.downgrade(conn, "sqlaq_0014")
        migrations.upgrade(conn, migrations.PARTITIONED_HEAD)
        migrations.upgrade(conn)
    assert relkind(engine) == "p"
    indexes = live_indexes(engine)
    assert "(idempotency_key IS NOT NULL)" in indexes["sqla_queue_jobs_active_key_idx"]
    assert "sqla_queue_jobs_waiting_idx" in indexes
    with engine.connect() as conn:
        migrations.downgrade(conn, "sqlaq_0014")
        assert (migrations.current(conn), migrations.partitioned_revision(conn)) == ("sqlaq_0014", PART)
    indexes = live_indexes(engine)
    assert "IS NOT NULL" not in indexes["sqla_queue_jobs_active_key_idx"]
    assert "sqla_queue_jobs_waiting_idx" not in indexes and relkind(engine) == "p"


def test_a_worker_that_has_not_noticed_the_way_back_cannot_archive_into_the_plain_table(engine):
    """Between the swap back and the history's drop, a worker's archiver that still takes the
    table for partitioned (it looks once a minute) finds the history's days and tries to move
    finished jobs: the plain table refuses the insert (its identity is GENERATED ALWAYS again,
    and the CHECK stays behind that), the delete goes with it, and every job stays put."""
    import importlib.util

    from sqla_queue.errors import DatabaseError
    from sqla_queue.services.archiving import Archiver

    spec = importlib.util.spec_from_file_location("part_0001", next(Path(migrations.PARTITIONED_LOCATION).glob("*.py")))
    revision = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(revision)
    queue = sq.Queue(engine, load_entrypoints=False)
    queue.task(name="echo")(lambda payload, ctx: None)
    with engine.connect() as conn:
        migrations.upgrade(conn, migrations.PARTITIONED_HEAD)
    queue.enqueue_many([{"task": "echo", "payload": {}} for _ in range(5)])
    assert queue.worker(concurrency=1).run(until_empty=True).completed == 5
    stale = Archiver(queue.core)
    with engine.connect() as conn:
        assert stale.history.partitioned(conn, fresh=True)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(revision.SWAP_BACK))
    with pytest.raises(DatabaseError, match=f"non-DEFAULT value|{revision.CHECK}"):
        stale.run_once(fresh=False)
    assert {(r.status, r.archived, r.place) for r in rows(engine)} == {("completed", False, "sqla_queue_jobs")}
    assert len(rows(engine)) == 5
    with engine.connect() as conn:
        migrations.downgrade(conn, migrations.PARTITIONED_BASE)
    assert relkind(engine) == "r" and len(rows(engine)) == 5


def test_a_step_that_cannot_get_its_lock_gives_up_and_running_it_again_finishes(engine):
    """A long transaction on the job table: the swap waits `lock_timeout`, fails with nothing of
    it done (the table still plain, no revision recorded), and a second run converts."""
    blocker = engine.connect()
    blocker.execute(text("SELECT count(*) FROM sqla_queue_jobs"))  # holds ACCESS SHARE
    try:
        with engine.connect() as conn, pytest.raises(Exception, match="lock timeout"):
            migrations.upgrade(conn, migrations.PARTITIONED_HEAD, lock_timeout=timedelta(milliseconds=200))
        assert relkind(engine) == "r" and stamped(engine) == {"sqlaq_0015"}
    finally:
        blocker.rollback()
        blocker.close()
    with engine.connect() as conn:
        migrations.upgrade(conn, migrations.PARTITIONED_HEAD)
    assert relkind(engine) == "p" and stamped(engine) == {"sqlaq_0015", PART}


def test_the_command_line_records_the_layout_and_turns_it_back(shell: Shell):
    assert shell.run("sqla-queue db upgrade").stdout == "sqla_queue schema at sqlaq_0015 (head)\n"
    assert shell.run("sqla-queue db partition-history").stdout.startswith("job table partitioned")
    assert shell.run("sqla-queue db current").stdout == f"sqlaq_0015 (head), partitioned layout {PART}\n"
    assert shell.run("sqla-queue db partition-history").stdout == "job table already partitioned: nothing to do\n"
    assert shell.run("sqla-queue db downgrade sqla_queue_partitioned@base").stdout == \
        "sqla_queue schema at sqlaq_0015 (head)\n"
    assert shell.run("sqla-queue db upgrade sqla_queue_partitioned@head").stdout == \
        f"sqla_queue schema at sqlaq_0015 (head), partitioned layout {PART}\n"


def test_a_host_that_lists_the_branch_gets_the_layout_with_alembic_upgrade_heads(host_app, empty_engine):
    app: HostApp = host_app(queue_location=f"{migrations.VERSION_RESOURCE} {migrations.PARTITIONED_RESOURCE}")
    app.shell.run("alembic upgrade heads")
    assert relkind(empty_engine) == "p"
    assert PART in stamped(empty_engine)
    app.shell.run("alembic downgrade sqla_queue_partitioned@base")
    assert relkind(empty_engine) == "r"


def test_after_the_layout_a_guarded_host_autogenerates_only_its_own_changes(host_app, empty_engine):
    """The partitions, the models' indexes (on the live partition) and the parent's identity
    are the layout's, not drift: `alembic check` finds nothing, and a new model of the host's
    is the only thing its next revision holds."""
    app: HostApp = host_app(queue_location=f"{migrations.VERSION_RESOURCE} {migrations.PARTITIONED_RESOURCE}")
    app.shell.env["HOST_GUARD"] = "1"
    app.shell.run("alembic upgrade heads")
    assert "No new upgrade operations detected" in app.shell.run("alembic check").stdout
    app.write("hostapp/models.py", (app.root / "hostapp" / "models.py").read_text() + SHIPMENT_MODEL)
    app.shell.run("alembic revision --autogenerate -m shipments --head=base --branch-label host "
                  "--version-path migrations/versions")
    [written] = [p for p in (app.root / "migrations" / "versions").glob("*shipments.py")]
    source = written.read_text()
    assert "op.create_table('shipments'" in source and "sqla_queue" not in source


SHIPMENT_MODEL = """

class Shipment(Base):
    __tablename__ = "shipments"
    id: Mapped[int] = mapped_column(primary_key=True)
"""
