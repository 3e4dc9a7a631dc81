"""Pause and resume with real processes: two CLI workers busy on queues ``a`` and ``b``;
``sqla-queue queues pause a`` stops every claim of ``a`` within one poll interval while ``b``
keeps flowing, an enqueue into ``a`` still lands, and ``queues resume a`` drains its backlog.
Times come from the database (``paused_at`` against each job's claim time, ``locked_at``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

import sqla_queue as sq

from waiting import wait_until

SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))
POLL = 0.5  # the workers' --poll-interval, seconds
A_JOBS, B_JOBS = 400, 1000  # b never runs out while the test waits on it, however late it pauses a

APP = textwrap.dedent(
    """
    import os
    import time

    import sqla_queue as sq

    queue = sq.Queue(os.environ["APP_DATABASE_URL"], load_entrypoints=False)

    @queue.task(queue="a")
    def slow_a(payload, ctx):
        time.sleep(0.05)

    @queue.task(queue="b")
    def slow_b(payload, ctx):
        time.sleep(0.05)
    """
)


@pytest.fixture
def setup(tmp_path, create_database):
    url = create_database()
    (tmp_path / "pauseapp.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env.update(APP_DATABASE_URL=url, PYTHONUNBUFFERED="1")
    engine = create_engine(url)
    producer = sq.Queue(engine, load_entrypoints=False)
    producer.task(name="slow_a", queue="a")(lambda payload, ctx: None)
    producer.task(name="slow_b", queue="b")(lambda payload, ctx: None)
    workers: list[subprocess.Popen] = []

    def start_worker() -> None:
        log = open(tmp_path / f"worker-{len(workers)}.log", "wb")
        workers.append(subprocess.Popen(
            # One process per worker: the job counts above assume two workers of 2 slots each.
            [SCRIPT, "--app", "pauseapp:queue", "worker", "--processes", "1", "--queues", "a,b", "--concurrency", "2",
             "--poll-interval", str(POLL)],
            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([SCRIPT, "--app", "pauseapp:queue", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    def query(sql: str, **params):
        with engine.connect() as conn:
            return conn.execute(text(sql), params).one()

    yield producer, start_worker, cli, query
    for process in workers:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in workers:
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    engine.dispose()


def completed(query, queue_name: str) -> int:
    return query("SELECT count(*) FROM sqla_queue_jobs WHERE queue_name = :q AND status = 'completed'",
                 q=queue_name)[0]


def test_pause_stops_claims_of_one_queue_on_every_worker_and_resume_drains_it(setup):
    producer, start_worker, cli, query = setup
    producer.enqueue_many([{"task": "slow_a", "payload": {"n": n}} for n in range(A_JOBS)])
    producer.enqueue_many([{"task": "slow_b", "payload": {"n": n}} for n in range(B_JOBS)])
    start_worker()
    start_worker()
    wait_until(lambda: completed(query, "a") >= 10 and completed(query, "b") >= 10, "both queues to flow")

    paused = cli("queues", "pause", "a")
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith("queue a is paused since "), paused.stdout
    [paused_at] = query("SELECT paused_at FROM sqla_queue_jobs_queues WHERE queue_name = 'a'")
    b_at_pause = completed(query, "b")

    # b keeps flowing: 60 more of its jobs take far longer than one poll interval.
    wait_until(lambda: completed(query, "b") >= b_at_pause + 60, "b to keep flowing")
    late = producer.enqueue("slow_a", {"late": True})  # enqueue into a paused queue works
    wait_until(lambda: completed(query, "b") >= b_at_pause + 100, "b to keep flowing after the enqueue")
    claimed_late, a_pending, last_claim = query(
        "SELECT count(*) FILTER (WHERE locked_at > :paused_at + make_interval(secs => :poll)),"
        " count(*) FILTER (WHERE status = 'pending'), max(locked_at)"
        " FROM sqla_queue_jobs WHERE queue_name = 'a'", paused_at=paused_at, poll=POLL)
    assert claimed_late == 0, f"jobs of the paused queue were claimed after {paused_at} (last {last_claim})"
    assert a_pending > 0 and producer.get_job(late).status is sq.JobStatus.PENDING
    states = {state.name: state for state in producer.list_queues()}
    assert states["a"].paused and not states["b"].paused
    assert states["a"].running == 0  # running jobs finished; none started

    resumed = cli("queues", "resume", "a")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("queue a is active"), resumed.stdout
    wait_until(lambda: completed(query, "a") == A_JOBS + 1, "a's backlog to drain")
    assert producer.get_job(late).status is sq.JobStatus.COMPLETED
