"""Wake-ups of enqueues: in the caller's transaction the INSERT notifies as it commits; in a
transaction of ours it commits without a NOTIFY (which would hold PostgreSQL's database-wide
notify lock through the commit's flush) and the Queue's notifier announces it right after.

Each test LISTENs on the table's channel on a connection of its own, as a worker's listener
does, and checks what arrives and that the job is visible when it does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import psycopg
import pytest
from sqlalchemy import text

import sqla_queue as sq

CHANNEL = "sqla_queue_jobs_enqueued"


@pytest.fixture
def listener(database_url):
    conn = psycopg.connect(database_url.replace("postgresql+psycopg", "postgresql"), autocommit=True)
    conn.execute(f'LISTEN "{CHANNEL}"')
    yield conn
    conn.close()


def received(listener, timeout: float = 5.0, until: str | None = None) -> list[str]:
    """Payloads that arrive within `timeout`, stopping early once `until` has arrived."""
    payloads = []
    for note in listener.notifies(timeout=timeout):
        payloads.append(note.payload)
        if until is not None and note.payload == until:
            break
    return payloads


def job_status(engine, job_id: int) -> str | None:
    with engine.connect() as conn:
        return conn.execute(text("SELECT status FROM sqla_queue_jobs WHERE id = :id"), {"id": job_id}).scalar()


@pytest.mark.parametrize("built_from", ["url", "engine"])
def test_an_enqueue_in_our_transaction_wakes_the_listeners_after_it_commits(
        built_from, database_url, engine, clean_jobs, listener):
    q = sq.Queue(database_url if built_from == "url" else engine, load_entrypoints=False)
    q.task(name="noop", queue="mail")(lambda payload, ctx: None)
    job_id = q.enqueue("noop", {"to": "someone"})
    assert received(listener, until="mail") == ["mail"]
    assert job_status(engine, job_id) == "pending"  # visible when the wake-up arrived
    # a batch wakes each of its queues once
    q.task(name="other", queue="images")(lambda payload, ctx: None)
    q.enqueue_many([{"task": "noop", "payload": {}}, {"task": "other", "payload": {}},
                    {"task": "noop", "payload": {}}])
    assert sorted(received(listener, timeout=1.0)) == ["images", "mail"]


def test_after_a_quiet_spell_the_enqueuing_call_sends_the_wake_up_itself(database_url, clean_jobs, listener):
    """So an idle worker wakes as soon as with a NOTIFY in the transaction: the notification
    is sent before `enqueue` returns, and no notifier thread was needed."""
    q = sq.Queue(database_url, load_entrypoints=False)
    q.task(name="noop", queue="mail")(lambda payload, ctx: None)
    q.enqueue("noop", {})
    assert q.core.enqueuer.notifier._thread is None
    assert received(listener, until="mail") == ["mail"]


def test_an_enqueue_in_the_callers_transaction_wakes_nobody_until_that_commits(
        engine, clean_jobs, listener):
    q = sq.Queue(engine, load_entrypoints=False)
    q.task(name="noop", queue="mail")(lambda payload, ctx: None)
    with engine.connect() as conn:
        with conn.begin():
            q.enqueue("noop", {}, connection=conn)
            assert received(listener, timeout=0.5) == []
        assert received(listener, until="mail") == ["mail"]
        with conn.begin() as rolled_back:
            q.enqueue("noop", {}, connection=conn)
            rolled_back.rollback()
    assert received(listener, timeout=0.5) == []


def test_a_deduplicated_enqueue_wakes_nobody(engine, clean_jobs, listener):
    q = sq.Queue(engine, load_entrypoints=False)
    q.task(name="noop", queue="mail")(lambda payload, ctx: None)
    first = q.enqueue("noop", {}, idempotency_key="k")
    assert received(listener, until="mail") == ["mail"]
    assert q.enqueue("noop", {}, idempotency_key="k") == first
    assert received(listener, timeout=0.5) == []


def test_concurrent_enqueues_all_wake_their_queues(database_url, engine, clean_jobs, listener):
    q = sq.Queue(database_url, load_entrypoints=False)
    queues = [f"q{n}" for n in range(8)]
    for name in queues:
        q.task(name=f"noop_{name}", queue=name)(lambda payload, ctx: None)

    def enqueue_into(name: str) -> None:
        for _ in range(25):
            q.enqueue(f"noop_{name}", {})

    threads = [threading.Thread(target=enqueue_into, args=(name,)) for name in queues]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    payloads = received(listener, timeout=2.0)
    assert set(payloads) == set(queues)
    assert len(payloads) <= 8 * 25


SCRIPT = """
import os, sys
import psycopg
import sqla_queue as sq
url, queue_name, how = sys.argv[1:]
q = sq.Queue(url, load_entrypoints=False)
q.task(name="noop", queue=queue_name)(lambda payload, ctx: None)
if how == "exit":
    q.enqueue("noop", {})
    sys.exit(0)  # at once: what the notifier has not sent yet goes out at exit
q.enqueue("noop", {})  # the parent's notifier thread is running when it forks
pid = os.fork()
if pid == 0:
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as own:
        own.execute('LISTEN "sqla_queue_jobs_enqueued"')
        q.enqueue("noop", {})
        heard = any(True for _ in own.notifies(timeout=5, stop_after=1))
    os._exit(0 if heard else 3)  # no atexit: only the child's own notifier thread can have sent
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.parametrize("how", ["exit", "fork"])
def test_a_process_that_enqueues_and_ends_at_once_or_forks_still_wakes_the_listeners(
        how, database_url, clean_jobs, listener, tmp_path):
    script = tmp_path / "enqueue_and_go.py"
    script.write_text(SCRIPT)
    queue_name = f"short_{how}"
    done = subprocess.run([sys.executable, str(script), database_url, queue_name, how],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert queue_name in received(listener, until=queue_name)


def test_a_single_enqueue_in_the_callers_transaction_notifies_only_for_a_job_it_inserted(
        engine, clean_jobs, listener):
    """The single-job INSERT reads whether the queue is fair and returns one row even when it
    inserted nothing (a held key, or a fair queue, where the INSERT with turns follows): that
    row sends no notification (pg_notify with the NULL queue name of no row would still send one,
    with an empty payload)."""
    q = sq.Queue(engine, load_entrypoints=False)
    q.task(name="noop", queue="mail")(lambda payload, ctx: None)
    first = q.enqueue("noop", {}, idempotency_key="k")
    assert received(listener, until="mail") == ["mail"]
    with engine.begin() as conn:
        assert q.enqueue("noop", {}, idempotency_key="k", connection=conn) == first  # held: nothing inserted
    assert received(listener, timeout=0.5) == []
    q.set_limits("mail", fair=True)
    with engine.begin() as conn:
        q.enqueue("noop", {}, connection=conn)  # the light INSERT writes nothing, the one with turns inserts
    assert received(listener, timeout=0.5) == ["mail"]
