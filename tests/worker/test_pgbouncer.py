"""Behind PgBouncer in transaction pooling mode: the distribution's PgBouncer (Debian 12: 1.18,
no protocol-level prepared statements), started here in front of this session's own PostgreSQL
(``own_server``), never the shared service.

What docs/how-to/run-workers.md ("Behind PgBouncer") promises, each through the pooler: enqueue
(sync and asyncio) from a Queue built on a ``?prepare_threshold=none`` URL; claims, every outcome,
complete-and-claim rounds, lease renewal, recovery, the operator reads and writes; an in-process
worker with ``prepared_statements=False, listen=False``; and a real ``sqla-queue worker
--pgbouncer`` process, whose LISTEN wake-ups come back with ``--listen-url`` (a direct connection).

PgBouncer comes from ``apt-get install pgbouncer`` (``bash .ci/run`` installs it). Missing
locally, these tests are skipped with that hint; in CI (``CI=true``) a missing PgBouncer fails.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

import sqla_queue as sq
from sqla_queue.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root holds benchmarks/

import doc_blocks  # noqa: E402
from benchmarks.pgbouncer import INSTALL_HINT, pgbouncer_binary, pgbouncer_in_front  # noqa: E402

DOC = ROOT / "docs" / "how-to" / "run-workers.md"

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
NEVER_PREPARE = {"prepare_threshold": "none"}
LISTENER_APP_NAME = "sqlaq-listen-direct"


@pytest.fixture(scope="module")
def bouncer(own_server):
    if pgbouncer_binary() is None:
        if IN_CI:
            pytest.fail(f"pgbouncer is not installed, and CI must run these tests: {INSTALL_HINT}")
        pytest.skip(f"pgbouncer is not installed: {INSTALL_HINT}")
    # A small server pool: several clients share each server connection, as in production.
    with pgbouncer_in_front(own_server.url(), run_as=own_server.server.run_as, pool_size=4) as running:
        yield running


@pytest.fixture(scope="module")
def direct_url(own_server) -> str:
    """A migrated database (with the fault app's side table) on the server behind PgBouncer."""
    return own_server.create_database()


def through(bouncer, direct_url: str, **query: str) -> str:
    """`direct_url`'s database reached through PgBouncer, with `query` added to the URL."""
    return make_url(bouncer.url(direct_url)).update_query_dict(query).render_as_string(hide_password=False)


def count(direct_url: str, sql: str, params: dict | None = None) -> int:
    engine = create_engine(direct_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return conn.execute(text(sql), params or {}).scalar_one()
    finally:
        engine.dispose()


def queue_on(url: str) -> sq.Queue:
    queue = sq.Queue(url, load_entrypoints=False)
    queue.task(name="noop", max_attempts=2, retry_delay=0)(lambda payload, ctx: None)
    return queue


# -- the URL setting ----------------------------------------------------------------------


def test_prepare_threshold_in_a_url_reaches_psycopg(own_server, direct_url):
    """psycopg takes ``prepare_threshold`` as a connection option; SQLAlchemy would hand it the
    URL's text, so the URL engines sqla_queue builds turn ``none`` into None and a number into
    an int, on the synchronous and the asyncio engine alike."""
    never = queue_on(make_url(direct_url).update_query_dict(NEVER_PREPARE).render_as_string(hide_password=False))
    after_two = queue_on(make_url(direct_url).update_query_dict({"prepare_threshold": "2"})
                         .render_as_string(hide_password=False))
    default = queue_on(direct_url)
    try:
        for queue, expected in ((never, None), (after_two, 2), (default, 5)):
            with queue.engine.connect() as conn:
                assert conn.connection.driver_connection.prepare_threshold == expected

            async def threshold_async(queue=queue):
                async with queue.core.executor.asyncio_engine().connect() as conn:
                    raw = await conn.get_raw_connection()
                    return raw.driver_connection.prepare_threshold

            assert asyncio.run(threshold_async()) == expected
    finally:
        for queue in (never, after_two, default):
            asyncio.run(queue.dispose_async())
            queue.engine.dispose()


@pytest.mark.parametrize("value", ["sometimes", "-1", "2.5"])
def test_a_bad_prepare_threshold_is_refused_naming_it(value):
    with pytest.raises(ConfigurationError, match=r"prepare_threshold .* got '"):
        sq.Queue(f"postgresql://postgres@127.0.0.1:1/nowhere?prepare_threshold={value}", load_entrypoints=False)


def test_without_the_setting_enqueues_collide_behind_pgbouncer(bouncer, own_server, direct_url):
    """Why the setting exists: two processes' Queues on a plain URL, taking turns. psycopg
    prepares the enqueue statement on its fifth run under the same name (``_pg3_0``) in both,
    and PgBouncer 1.18 hands both to the same idle server connection, where the name is taken.
    A pool of one server connection makes "the same" certain; with more, which idle connection
    each client gets (and what earlier tests prepared there) is PgBouncer's choice."""
    with pgbouncer_in_front(own_server.url(), run_as=own_server.server.run_as, pool_size=1) as single:
        first, second = queue_on(through(single, direct_url)), queue_on(through(single, direct_url))
        _enqueue_until_they_collide(first, second, single)


def _enqueue_until_they_collide(first: sq.Queue, second: sq.Queue, bouncer) -> None:
    """Many more turns than the five it takes: a client connection the pool replaces on the way
    (one idle for a second on a loaded machine is pinged, and a failed ping replaces it) starts
    psycopg's count again, and the collision comes after its next five."""
    try:
        for n in range(40):
            for queue in (first, second):
                try:
                    queue.enqueue("noop", {"n": n}, queue="collide")
                except sq.DatabaseError as exc:
                    assert "prepared statement" in str(exc)
                    return
        pytest.fail(f"40 turns each and no collision; PgBouncer's log:\n{bouncer.log_text()}")
    finally:
        first.engine.dispose()
        second.engine.dispose()


# -- the library through PgBouncer ----------------------------------------------------------


def test_enqueue_through_pgbouncer_sync_and_asyncio(bouncer, direct_url):
    """Concurrent enqueues from a Queue on a ``?prepare_threshold=none`` URL: every statement
    runs far more than five times per connection, and none is ever prepared."""
    queue = queue_on(through(bouncer, direct_url, **NEVER_PREPARE))
    errors: list[BaseException] = []

    def enqueue_some() -> None:
        try:
            for n in range(20):
                queue.enqueue("noop", {"n": n}, queue="enq")
            queue.enqueue_many([{"task": "noop", "payload": {"n": n}, "queue": "enq"} for n in range(5)])
        except BaseException as exc:  # collected, so the assertion below shows it
            errors.append(exc)

    async def enqueue_async() -> list[int]:
        ids = await asyncio.gather(*(queue.enqueue_async("noop", {"n": n}, queue="enq") for n in range(20)))
        ids += await queue.enqueue_many_async([{"task": "noop", "payload": {}, "queue": "enq"}] * 5)
        await queue.dispose_async()
        return list(ids)

    try:
        threads = [threading.Thread(target=enqueue_some) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert len(asyncio.run(enqueue_async())) == 25
    finally:
        queue.engine.dispose()
    assert count(direct_url, "SELECT count(*) FROM sqla_queue_jobs WHERE queue_name = 'enq'") == 4 * 25 + 25


def test_claims_outcomes_leases_recovery_and_operations_through_pgbouncer(bouncer, direct_url):
    queue = queue_on(through(bouncer, direct_url, **NEVER_PREPARE))
    name = "ops"
    try:
        ids = queue.enqueue_many([{"task": "noop", "payload": {"n": n}, "queue": name} for n in range(13)])
        for _ in range(3):  # the same statements again and again, as a worker runs them
            done_ok, got = queue.complete_and_claim([], name, worker_id="w", limit=2)
            assert done_ok == {} and len(got) == 2
            done_ok, more = queue.complete_and_claim(got, name, worker_id="w", limit=1,
                                                      results={got[0].id: {"ok": True}})
            assert done_ok == {got[0].id: True, got[1].id: True} and len(more) == 1
            assert queue.renew(more) == {more[0].id: False}
            assert queue.heartbeat(more) == {more[0].id}
            assert queue.complete(more[0].id, more[0].claim_token) is True
        retried, failed, released, expired = queue.claim(name, worker_id="w", limit=4,
                                                         lease=timedelta(microseconds=1))
        assert queue.retry(retried.id, retried.claim_token, error="flaky", delay=0) is not None
        assert queue.fail(failed.id, failed.claim_token, error="broken") is True
        assert queue.release([released]) == [released.id]
        assert queue.recover_expired() == [expired.id]

        assert queue.get_job(ids[0]).result == {"ok": True}
        health = queue.stats().queues[name]
        assert (health.pending, health.running, health.completed, health.failed) == (3, 0, 9, 1)
        page = queue.list_jobs(queue=name, status="failed")
        assert [job.id for job in page.jobs] == [failed.id]
        assert queue.retry_now(failed.id).status == "pending"
        assert queue.cancel(failed.id).status == "cancelled"
        assert queue.pause(name).paused
        assert queue.claim(name, worker_id="w", limit=10) == []
        assert not queue.resume(name).paused
        assert name in {state.name for state in queue.list_queues()}
        gone = timedelta(microseconds=1)
        pruned = queue.prune(completed_after=gone, failed_after=gone, cancelled_after=gone)
        assert (pruned.completed, pruned.cancelled) == (9, 1)
    finally:
        queue.engine.dispose()


def test_an_in_process_worker_through_pgbouncer(bouncer, direct_url):
    """``prepared_statements=False`` and the listener on a direct connection (``listen_engine``):
    completions, retries to failure, an ``async def`` handler, and a job that outlives its lease
    twice over, kept by renewals (a failed renewal would fence it: ``lost``), which `Queue.wait`
    sees finish through PgBouncer (its once-a-second read of the row: a LISTEN through the
    pooler hears nothing)."""
    queue = sq.Queue(through(bouncer, direct_url, **NEVER_PREPARE), load_entrypoints=False)
    name = "inproc"

    @queue.task(queue=name)
    def ok(payload, ctx):
        return payload["n"]

    @queue.task(queue=name, max_attempts=2, retry_delay=0)
    def broken(payload, ctx):
        raise RuntimeError("always")

    @queue.task(queue=name)
    async def coroutine(payload, ctx):
        await asyncio.sleep(0)

    @queue.task(queue=name)
    def long(payload, ctx):
        threading.Event().wait(5)  # lease 2 s: renewed every 2/3 s meanwhile (1 s left too little slack under CI load)
        return "kept"

    try:
        queue.enqueue_many([{"task": "ok", "payload": {"n": n}} for n in range(40)])
        queue.enqueue_many([{"task": "coroutine", "payload": {}}] * 10)
        queue.enqueue("broken", {})
        long_id = queue.enqueue("long", {})
        worker = queue.worker(queues=[name], concurrency=4, lease=timedelta(seconds=2), poll_interval=0.05,
                              prepared_statements=False, listen_engine=direct_url)
        summaries = []
        thread = threading.Thread(target=lambda: summaries.append(worker.run(until_empty=True)))
        thread.start()
        try:
            finished = queue.wait(long_id, timeout=30)
        finally:
            thread.join(60)
    finally:
        queue.engine.dispose()
    assert (finished.status, finished.result) == ("completed", "kept")
    [summary] = summaries
    assert (summary.completed, summary.retried, summary.failed, summary.lost) == (51, 1, 1, 0), summary


# -- the command line ---------------------------------------------------------------------


def test_the_cli_worker_drains_through_pgbouncer(bouncer, direct_url, fault_app):
    """``sqla-queue worker --pgbouncer --until-empty``: every job once, sync and async handlers
    (their side effects go straight to PostgreSQL), and the exit code 0."""
    app = fault_app(direct_url)
    total = app.completed() + 60
    app.enqueue(40)
    app.producer.enqueue_many([{"task": "work_async", "payload": {"sleep": 0.001}}] * 20)
    via = through(bouncer, app.queue_url(direct_url), **NEVER_PREPARE)
    worker = app.start_worker("--pgbouncer", "--until-empty", "--concurrency", "4", queue_url=via)
    assert worker.process.wait(60) == 0, worker.log()[-3000:]
    assert app.completed() == total
    assert app.scalar("SELECT count(*) FROM sqla_queue_jobs "
                      "WHERE task IN ('work', 'work_async') AND status <> 'completed'") == 0
    assert "completed 60" in worker.log()


def test_listen_url_gives_the_cli_worker_wake_ups_behind_pgbouncer(bouncer, direct_url, fault_app):
    """With ``--pgbouncer --listen-url <direct>``, the listener LISTENs on its own direct
    connection: a worker whose poll interval is five minutes starts each job within seconds of
    its enqueue, which only a notification can explain."""
    app = fault_app(direct_url)
    via = through(bouncer, app.queue_url(direct_url), **NEVER_PREPARE)
    listen = make_url(direct_url).update_query_dict({"application_name": LISTENER_APP_NAME})
    app.start_worker("--pgbouncer", "--listen-url", listen.render_as_string(hide_password=False),
                     "--poll-interval", "300s", "--concurrency", "1", queue_url=via)
    app.wait_until(lambda: app.scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name AND datname = :db",
        {"name": LISTENER_APP_NAME, "db": make_url(direct_url).database}), 30,
        "the listener's direct connection")
    before = app.completed()
    for n in range(3):
        app.enqueue_one()
        app.wait_until(lambda: app.completed() == before + n + 1, 30,
                       f"job {n + 1} to be started by a notification, not the 300 s poll")


def test_listen_url_contradicting_no_listen_is_refused(fault_app, direct_url):
    app = fault_app(direct_url)
    worker = app.start_worker("--no-listen", "--listen-url", direct_url)
    assert worker.process.wait(30) == 2
    assert "--listen-url and --no-listen" in worker.log()


def test_listen_engine_needs_listen():
    queue = sq.Queue("postgresql://postgres@127.0.0.1:1/nowhere", load_entrypoints=False)
    with pytest.raises(ConfigurationError, match="listen_engine is set but listen is False"):
        queue.worker(listen=False, listen_engine="postgresql://postgres@127.0.0.1:1/nowhere")
    with pytest.raises(ConfigurationError, match="listen_engine must be"):
        queue.worker(listen_engine=42)
    with pytest.raises(ConfigurationError, match="not a database URL"):
        queue.worker(listen_engine="not a url")


# -- docs/how-to/run-workers.md, "Behind PgBouncer", as written --------------------------------


def test_the_doc_pool_settings_are_the_ones_these_tests_run_with(bouncer):
    [ini] = doc_blocks.blocks(DOC, "ini")
    running = {line.strip() for line in bouncer.config.read_text().splitlines()}
    assert {line.strip() for line in ini.splitlines() if line.strip()} <= running


def test_the_doc_worker_command_behind_pgbouncer(bouncer, direct_url, tmp_path):
    """The page's command, run as written, with the two URLs the page puts in its environment:
    its app module's Queue on PgBouncer, its listener directly on PostgreSQL."""
    [command] = [c for c in doc_blocks.console_commands(DOC) if "--pgbouncer" in c]
    package = tmp_path / "myapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text(doc_blocks.blocks(DOC, "python")[0])
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env.update(SQLA_QUEUE_DATABASE_URL=through(bouncer, direct_url, **NEVER_PREPARE), SQLA_QUEUE_LISTEN_URL=direct_url,
               SQLA_QUEUE_DISABLE_PLUGIN_AUTOLOAD="1")
    words = command.split()
    assert words[0] == "sqla-queue"
    process = subprocess.Popen([str(Path(sys.executable).with_name("sqla-queue")), *words[1:]], cwd=tmp_path,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    producer = queue_on(direct_url)
    producer.task(name="send_email", queue="emails")(lambda payload, ctx: None)
    try:
        job_id = producer.enqueue("send_email", {"to": "a@b.c"})
        finished = producer.wait(job_id, timeout=60)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        producer.engine.dispose()
    assert finished.status == "completed"
    assert process.returncode == 0, err
    assert out.strip().startswith("claimed 1, completed 1")
