"""The worker registry on real PostgreSQL: a worker's row from start to clean exit, its
heartbeat on the lease keeper's beat, a worker killed without a clean exit shown dead once its
lease has passed, the sweep of long-dead rows, and a registry that cannot be written never
stopping a worker, and doctor against a real worker. Each test has a database of its own, so no
other test's worker appears."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

import sqla_queue as sq
from sqla_queue.ops.doctor import Check, Doctor, Verdict
from sqla_queue.services.registry import WorkerDescription, WorkerRegistration

from waiting import wait_until


@pytest.fixture
def registry_db(own_database):
    url, engine = own_database
    queue = sq.Queue(engine, load_entrypoints=False)

    @queue.task(queue="emails")
    def send_email(payload, ctx):
        return None

    @queue.task
    def resize(payload, ctx):
        return None

    return url, engine, queue


def running_worker(queue: sq.Queue, **options):
    worker = queue.worker(**options)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread


def test_a_worker_registers_at_start_with_what_it_serves_and_removes_its_row_on_a_clean_exit(registry_db):
    _, _, queue = registry_db
    worker, thread = running_worker(queue, queues=["emails", "default"], concurrency=3)
    [info] = wait_until(queue.workers, "the worker's row")
    assert (info.worker_id, info.host, info.pid, info.concurrency) == (worker.worker_id, socket.gethostname(),
                                                                        os.getpid(), 3)
    assert info.queues == ("emails", "default") and info.tasks == ("resize", "send_email")
    assert info.version == sq.__version__ and info.state == "running" and info.status == "running"
    assert info.alive and info.expires_at - info.heartbeat_at == timedelta(seconds=60)  # the default lease

    worker.stop()
    thread.join(timeout=60)
    assert queue.workers() == []


def test_the_lease_keepers_beat_refreshes_the_heartbeat_shows_running_jobs_and_a_drain(registry_db):
    _, _, queue = registry_db
    release = threading.Event()

    @queue.task(name="hold")
    def hold(payload, ctx):
        release.wait(60)

    job_id = queue.enqueue("hold", {})
    worker, thread = running_worker(queue, lease=timedelta(seconds=3))  # a beat every second
    first = wait_until(lambda: [w for w in queue.workers() if w.running_job_ids == (job_id,)], "the held job")[0]
    later = wait_until(lambda: [w for w in queue.workers() if w.heartbeat_at > first.heartbeat_at],
                       "a heartbeat on the lease keeper's beat")[0]
    assert later.started_at == first.started_at and later.expires_at > first.expires_at
    worker.stop()  # it drains: the handler still runs, and the next beat says so
    wait_until(lambda: [w for w in queue.workers() if w.status == "stopping"], "the stopping state")
    release.set()
    thread.join(timeout=60)
    assert queue.get_job(job_id).status is sq.JobStatus.COMPLETED and queue.workers() == []


KILLED_APP = textwrap.dedent(
    """
    import sys
    from datetime import timedelta

    import sqla_queue as sq

    queue = sq.Queue(sys.argv[1], load_entrypoints=False)
    queue.task(name="send_email", queue="emails")(lambda payload, ctx: None)
    queue.worker(queues=["emails"], lease=timedelta(seconds=3)).run()
    """
)


def test_a_killed_worker_is_shown_dead_once_its_lease_passes_and_doctor_says_its_queue_is_unserved(
        registry_db, tmp_path: Path):
    url, _, queue = registry_db
    (tmp_path / "killed.py").write_text(KILLED_APP)
    process = subprocess.Popen([sys.executable, str(tmp_path / "killed.py"), url], cwd=tmp_path)
    try:
        [info] = wait_until(lambda: [w for w in queue.workers() if w.pid == process.pid and w.alive],
                            "the worker process to register")
        assert info.queues == ("emails",)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    [dead] = wait_until(lambda: [w for w in queue.workers() if not w.alive], "the killed worker to turn dead")
    assert (dead.pid, dead.status, dead.state) == (process.pid, "dead", "running")  # no clean exit wrote it
    assert queue.workers(include_dead=False) == []


def test_a_starting_worker_sweeps_the_rows_of_workers_dead_for_a_day(registry_db):
    _, engine, queue = registry_db
    for worker_id, dead_for in (("long-gone", "25 hours"), ("just-died", "1 minute")):
        with engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO sqla_queue_jobs_workers (id, host, pid, version, queues, tasks, concurrency, "
                "expires_at) VALUES (:id, 'old-host', 1, '0.0.1', '{default}', '{}', 1, "
                "now() - CAST(:dead_for AS interval))"), {"id": worker_id, "dead_for": dead_for})
    worker, thread = running_worker(queue)
    wait_until(lambda: any(w.alive for w in queue.workers()), "the new worker's row")
    assert [(w.worker_id, w.alive) for w in queue.workers()] == [(worker.worker_id, True), ("just-died", False)]
    worker.stop()
    thread.join(timeout=60)


def test_a_registry_that_cannot_be_written_never_stops_the_worker(registry_db, caplog):
    """A schema without the registry (code deployed before `sqla-queue db upgrade`), or a role
    without its grant: the worker logs it and works on."""
    _, engine, queue = registry_db
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE sqla_queue_jobs_workers"))
    job_id = queue.enqueue("resize", {})
    with caplog.at_level(logging.WARNING, logger="sqla_queue.worker"):
        summary = queue.worker(queues=["default"]).run(until_empty=True)
    assert summary.completed == 1 and queue.get_job(job_id).status is sq.JobStatus.COMPLETED
    assert "registry register failed" in caplog.text


def test_a_beat_brings_back_a_row_someone_deleted(registry_db):
    _, engine, queue = registry_db
    registration = WorkerRegistration(queue.core, WorkerDescription.of_this_process(
        "w-1", ["default"], ["resize"], 2, timedelta(seconds=30)))
    assert registration.register()
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM sqla_queue_jobs_workers"))
    assert registration.beat()
    assert [(w.worker_id, w.alive, w.concurrency) for w in queue.workers()] == [("w-1", True, 2)]
    assert registration.remove() and queue.workers() == []


def test_doctor_is_red_with_no_worker_and_green_while_a_real_worker_serves_the_queue(registry_db):
    _, _, queue = registry_db
    release = threading.Event()
    queue.task(name="slow", queue="emails")(lambda payload, ctx: release.wait(60))
    queue.enqueue_many([{"task": "slow", "payload": {"n": n}} for n in range(5)])

    def unserved() -> Check:
        return {c.name: c for c in Doctor(queue).run().checks}["unserved queues"]

    assert unserved().verdict is Verdict.FAIL and unserved().summary.endswith("serves: emails")
    worker, thread = running_worker(queue, queues=["emails"], concurrency=1, prefetch=0)
    try:
        wait_until(lambda: queue.workers() and queue.workers()[0].running_job_ids, "a job running")
        check = unserved()  # four jobs still wait, on a queue a live worker serves
        assert check.verdict is Verdict.OK, check
    finally:
        release.set()
        worker.stop()
        thread.join(timeout=60)
