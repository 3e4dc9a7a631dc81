"""The fast enqueue path of a Queue built from a URL: autocommit where that is safe, and only there.

``Queue(url)`` builds its own engine (`make_engine`). An enqueue without ``session=`` or
``connection=`` runs its INSERT in autocommit (one round trip) when the connection's session
defaults to READ COMMITTED and the INSERT is everything the call can write (one job, or jobs
without keys); otherwise, and always on an application's own engine, it runs in our own
READ COMMITTED transaction. A trigger records the isolation level each inserting statement ran
at; libpq's protocol trace shows what the client sent.
"""

from __future__ import annotations

import re
import tempfile
import threading
from collections import defaultdict
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.orm import Session

import sqla_queue as sq
from sqla_queue.db import engine as _engine
from sqla_queue.db.engine import capabilities_of, make_engine

RECORD_INSERTS = """
CREATE TABLE insert_seen (job_id bigint, isolation text);
CREATE FUNCTION record_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO insert_seen VALUES (NEW.id, current_setting('transaction_isolation'));
  RETURN NEW;
END $$;
CREATE TRIGGER record_insert AFTER INSERT ON sqla_queue_jobs
  FOR EACH ROW EXECUTE FUNCTION record_insert();
"""


def _database(create_database, default_isolation: str | None = None) -> str:
    url = create_database()
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(RECORD_INSERTS)
        if default_isolation:
            name = conn.execute(text("SELECT current_database()")).scalar_one()
            conn.execute(text(
                f"ALTER DATABASE \"{name}\" SET default_transaction_isolation = '{default_isolation}'"
            ))
    admin.dispose()
    return url


def _isolation_seen(url: str) -> dict[int, str]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT job_id, isolation FROM insert_seen")).all()
    engine.dispose()
    return dict(rows)


def _url_queue(url: str, **options) -> sq.Queue:
    queue = sq.Queue(url, load_entrypoints=False, **options)
    queue.task(lambda payload, ctx: None, name="send_email")
    queue.task(lambda payload, ctx: None, name="resize", queue="images", max_attempts=2)
    return queue


@pytest.fixture
def url_queue(database_url, clean_jobs):
    """A Queue built from the shared database's URL, on an empty job table."""
    queue = _url_queue(database_url)
    yield queue
    queue.engine.dispose()


def settle(queue: sq.Queue) -> None:
    """Wait until the Queue's notifier has sent the wake-ups of earlier enqueues: it borrows a
    pooled connection to send them, so until then the pool's one connection may be in use."""
    queue.core.enqueuer.notifier.flush()


class Trace:
    """What the client sends on `queue`'s (or `engine`'s) one pooled connection during a call
    (libpq's trace): each simple ``Query`` by its text, each extended-protocol exchange as
    ``"Sync"``; together, the call's round trips. The wake-ups the call asks for are held back
    while it runs (`queues_woken` lists them): the notifier sends them after the commit, on a
    pooled connection of its own choosing (tests/core/enqueue/test_wake_after_commit.py)."""

    def __init__(self, queue_or_engine) -> None:
        self.queue = queue_or_engine if isinstance(queue_or_engine, sq.Queue) else None
        engine = self.queue.engine if self.queue is not None else queue_or_engine
        if self.queue is not None:
            settle(self.queue)
        with engine.connect() as conn:
            self.pgconn = conn.connection.driver_connection.pgconn
        self.queues_woken: list[str] = []

    def __call__(self, call):
        notifier = self.queue.core.enqueuer.notifier if self.queue is not None else None
        if notifier is not None:
            settle(self.queue)
            send, notifier._send = notifier._send, self.queues_woken.extend
        with tempfile.TemporaryFile() as file:
            self.pgconn.trace(file.fileno())
            try:
                result = call()
            finally:
                self.pgconn.untrace()
                if notifier is not None:
                    notifier._send = send
            file.seek(0)
            lines = file.read().decode().splitlines()
        sent = []
        for line in lines:
            fields = line.split("\t")
            if len(fields) > 3 and fields[1] == "F" and fields[3] in ("Query", "Sync"):
                sent.append("Sync" if fields[3] == "Sync" else re.sub(r'^ "|"$', "", fields[4]))
        return result, sent


# -- what runs in autocommit, and at which isolation ------------------------------------------


def test_url_queue_enqueues_in_one_round_trip_where_nothing_can_half_write(create_database, monkeypatch):
    monkeypatch.setattr(_engine, "PING_IF_IDLE_FOR", 3600.0)  # no idle ping in the traces
    url = _database(create_database)
    queue = _url_queue(url)
    trace = Trace(queue)
    try:
        single, single_sent = trace(lambda: queue.enqueue("send_email", {"n": 1}))
        keyed, keyed_sent = trace(lambda: queue.enqueue("send_email", {"n": 2}, idempotency_key="k-1"))
        batch, batch_sent = trace(lambda: queue.enqueue_many(
            [{"task": "send_email", "payload": {"n": n}} for n in range(3)]
        ))
        keyed_batch, keyed_batch_sent = trace(lambda: queue.enqueue_many([
            {"task": "send_email", "payload": {}, "idempotency_key": "k-2"},
            {"task": "send_email", "payload": {}},
        ]))
        seen = _isolation_seen(url)
    finally:
        queue.engine.dispose()

    assert single_sent == keyed_sent == batch_sent == ["Sync"]  # the INSERT, nothing else
    # Keys in a batch: a half-done batch must never commit, so our own transaction.
    assert keyed_batch_sent == ["BEGIN ISOLATION LEVEL READ COMMITTED", "Sync", "COMMIT"]
    assert {seen[i] for i in [single, keyed, *batch, *keyed_batch]} == {"read committed"}


def test_enqueues_in_the_callers_transaction_or_on_an_application_engine_are_unchanged(
    create_database, monkeypatch
):
    monkeypatch.setattr(_engine, "PING_IF_IDLE_FOR", 3600.0)
    url = _database(create_database)
    url_queue = _url_queue(url)
    host_engine = create_engine(url, pool_size=1)
    host_queue = sq.Queue(host_engine, load_entrypoints=False)
    host_queue.task(lambda payload, ctx: None, name="send_email")
    try:
        with Session(url_queue.engine) as session:
            in_session = url_queue.enqueue("send_email", {}, session=session)
            session.commit()
        on_host, host_sent = Trace(host_queue)(lambda: host_queue.enqueue("send_email", {}))
        seen = _isolation_seen(url)
    finally:
        url_queue.engine.dispose()
        host_engine.dispose()

    assert host_sent == ["BEGIN ISOLATION LEVEL READ COMMITTED", "Sync", "COMMIT"]
    assert seen[in_session] == seen[on_host] == "read committed"


def test_url_queue_enqueues_read_committed_when_the_database_defaults_to_serializable(
    create_database, monkeypatch
):
    monkeypatch.setattr(_engine, "PING_IF_IDLE_FOR", 3600.0)
    url = _database(create_database, "serializable")
    queue = _url_queue(url)
    trace = Trace(queue)
    try:
        with queue.engine.connect() as conn:  # sessions are looked at, never changed
            assert conn.execute(text("SHOW default_transaction_isolation")).scalar_one() == "serializable"
        single, sent = trace(lambda: queue.enqueue("send_email", {}))
        [batch] = queue.enqueue_many([{"task": "send_email", "payload": {}}])
        seen = _isolation_seen(url)
    finally:
        queue.engine.dispose()

    # An autocommit statement would run SERIALIZABLE here: our own transaction instead.
    assert sent == ["BEGIN ISOLATION LEVEL READ COMMITTED", "Sync", "COMMIT"]
    assert seen[single] == seen[batch] == "read committed"


def test_make_engine_is_not_mistaken_for_a_worker_engine(database_url):
    """`Queue.on_engine` runs single statements in autocommit on an engine whose capabilities
    say so (a worker's); `make_engine`'s does not (the CLI puts a queue on one)."""
    engine = make_engine(database_url)
    try:
        assert not capabilities_of(engine).autocommit_single_statements
        with engine.connect() as conn:
            assert not conn.connection.driver_connection.autocommit
    finally:
        engine.dispose()


def test_an_application_engine_is_left_untouched(database_url, clean_jobs):
    host = create_engine(database_url, pool_size=2)
    seen_sql: list[str] = []
    event.listen(host, "before_cursor_execute", lambda conn, cursor, statement, *rest: seen_sql.append(statement))
    listeners = {name: list(getattr(host.pool.dispatch, name)) for name in ("connect", "checkout", "checkin")}
    options, pre_ping = dict(host.get_execution_options()), host.pool._pre_ping
    try:
        queue = sq.Queue(host, load_entrypoints=False)
        queue.task(lambda payload, ctx: None, name="send_email")
        queue.enqueue("send_email", {})
        queue.enqueue_many([{"task": "send_email", "payload": {}} for _ in range(2)])

        assert {name: list(getattr(host.pool.dispatch, name)) for name in listeners} == listeners
        assert (dict(host.get_execution_options()), host.pool._pre_ping) == (options, pre_ping)
        with host.connect() as conn:
            assert conn.get_isolation_level() == "READ COMMITTED"
            assert "sqla_queue_reads_committed" not in conn.info
        # The host's instrumentation still sees our statements: we go through SQLAlchemy.
        assert sum("INSERT INTO sqla_queue_jobs" in sql for sql in seen_sql) == 2
    finally:
        host.dispose()


# -- the same behaviour as every other enqueue -------------------------------------------------


def test_url_queue_stores_every_option(url_queue, job_row):
    job_id = url_queue.enqueue(
        "resize", {"w": 10}, queue="thumbnails", max_attempts=7, idempotency_key="img-1", delay=60
    )
    [batch_id] = url_queue.enqueue_many([{"task": "resize", "payload": {"w": 11}, "delay": timedelta(minutes=1)}])
    row, batch_row = job_row(job_id), job_row(batch_id)
    assert (row["task"], row["queue_name"], row["max_attempts"], row["idempotency_key"], row["payload"]) == (
        "resize", "thumbnails", 7, "img-1", {"w": 10},
    )
    assert row["run_at"] - row["created_at"] == timedelta(seconds=60)
    assert (batch_row["queue_name"], batch_row["max_attempts"], batch_row["idempotency_key"]) == ("images", 2, None)
    assert batch_row["run_at"] - batch_row["created_at"] == timedelta(seconds=60)


def test_url_queue_keeps_payloads_that_need_escaping_intact(url_queue, job_row):
    """Arrays go to psycopg in binary: quotes, backslashes, braces and commas arrive unchanged."""
    payloads = [
        {"q": 'say "hi"', "b": "back\\slash", "braces": "{a,b}", "nul-looking": "\\u0000"},
        {"unicode": "Zoë 東京 😀", "nested": {"list": [1, 2.5, None, True]}, "empty": ""},
    ]
    ids = url_queue.enqueue_many([{"task": "send_email", "payload": p} for p in payloads])
    single = url_queue.enqueue("send_email", payloads[0])
    assert [job_row(i)["payload"] for i in [*ids, single]] == [*payloads, payloads[0]]


def test_url_queue_returns_ids_in_input_order_with_and_without_keys(url_queue, job_row, count_jobs):
    first = url_queue.enqueue("send_email", {"n": -1}, idempotency_key="held")
    jobs = [{"task": "send_email", "payload": {"n": n}} for n in range(6)]
    jobs[1]["idempotency_key"] = "held"
    jobs[2]["idempotency_key"] = "new"
    jobs[4]["idempotency_key"] = "new"
    jobs[5]["queue"] = "emails"

    ids = url_queue.enqueue_many(jobs)

    assert ids[1] == first and ids[2] == ids[4]
    assert len({ids[0], ids[2], ids[3], ids[5], first}) == 5
    assert [job_row(ids[n])["payload"] for n in (0, 2, 3, 5)] == [{"n": 0}, {"n": 2}, {"n": 3}, {"n": 5}]
    assert job_row(ids[5])["queue_name"] == "emails"
    assert count_jobs() == 5


def test_url_queue_returns_the_active_holder_of_a_key(url_queue, count_jobs):
    first = url_queue.enqueue("send_email", {"v": 1}, idempotency_key="welcome:42")
    second = url_queue.enqueue("send_email", {"v": 2}, idempotency_key="welcome:42")
    [job] = url_queue.claim(worker_id="w")
    while_running = url_queue.enqueue("send_email", {"v": 3}, idempotency_key="welcome:42")
    url_queue.complete(job.id, job.claim_token)
    after = url_queue.enqueue("send_email", {"v": 4}, idempotency_key="welcome:42")

    assert first == second == while_running == job.id != after
    assert count_jobs() == 2


def test_url_queue_fires_enqueued_events_with_the_deduplicated_flag(database_url, clean_jobs, recorder):
    queue = sq.Queue(database_url, load_entrypoints=False, plugins=[recorder])
    queue.task(lambda payload, ctx: None, name="send_email")
    try:
        first = queue.enqueue("send_email", {}, idempotency_key="k")
        second = queue.enqueue("send_email", {}, idempotency_key="k")
        batch = queue.enqueue_many([{"task": "send_email", "payload": {}} for _ in range(2)])
    finally:
        queue.engine.dispose()
    events = recorder.of("enqueued")
    assert [(e.job_id, e.deduplicated) for e in events] == [
        (first, False), (second, True), (batch[0], False), (batch[1], False)
    ]
    assert {(e.queue, e.task) for e in events} == {("default", "send_email")}


def test_url_queue_notifies_listeners_when_an_autocommit_enqueue_commits(url_queue, database_url):
    import psycopg

    listener = psycopg.connect(database_url.replace("postgresql+psycopg", "postgresql"), autocommit=True)
    try:
        listener.execute(f'LISTEN "{url_queue.notify_channel}"')
        url_queue.enqueue("resize", {})
        url_queue.enqueue_many([{"task": "send_email", "payload": {}}, {"task": "send_email", "payload": {}}])
        received = {n.payload for n in listener.notifies(timeout=10, stop_after=2)}
    finally:
        listener.close()
    assert received == {"images", "default"}


def test_url_queue_writes_nothing_for_a_bad_job(url_queue, count_jobs):
    with pytest.raises(sq.InvalidInputError, match=r"jobs\[1\]"):
        url_queue.enqueue_many([
            {"task": "send_email", "payload": {}},
            {"task": "send_email", "payload": {"v": "\x00"}},
        ])
    with pytest.raises(sq.InvalidInputError, match="queue"):
        url_queue.enqueue("send_email", {}, queue=" padded ")
    assert count_jobs() == 0


def _wait_until_blocked(engine, holder_pid: int, thread: threading.Thread, result: dict) -> None:
    """Poll (no sleep) until some backend waits on `holder_pid`."""
    with engine.connect() as conn:
        for _ in range(100_000):
            assert thread.is_alive(), f"the enqueue ended without waiting: {result}"
            waiting = conn.execute(  # pg_locks is read live (pg_stat_activity once per transaction)
                text("SELECT count(*) FROM pg_locks WHERE NOT granted AND :pid = ANY(pg_blocking_pids(pid))"),
                {"pid": holder_pid},
            ).scalar_one()
            conn.rollback()
            if waiting:
                return
    raise AssertionError("the autocommit enqueue never waited on the key holder")


@pytest.mark.parametrize("holder_commits", [True, False], ids=["holder-commits", "holder-rolls-back"])
def test_url_queue_waits_for_an_uncommitted_key_holder(url_queue, engine, count_jobs, holder_commits):
    result: dict[str, object] = {}

    def second_enqueue() -> None:
        try:
            result["id"] = url_queue.enqueue("send_email", {"who": "second"}, idempotency_key="order:1")
        except BaseException as exc:  # pragma: no cover - reported below
            result["error"] = exc

    with engine.connect() as holder:
        holder_pid = holder.execute(text("SELECT pg_backend_pid()")).scalar_one()
        holder.rollback()
        holder.begin()
        holder_id = url_queue.enqueue("send_email", {"who": "first"}, idempotency_key="order:1", connection=holder)
        thread = threading.Thread(target=second_enqueue)
        thread.start()
        _wait_until_blocked(engine, holder_pid, thread, result)
        holder.commit() if holder_commits else holder.rollback()
    thread.join(timeout=60)

    assert not thread.is_alive()
    assert "error" not in result, result.get("error")
    assert count_jobs() == 1
    if holder_commits:
        assert result["id"] == holder_id
    else:
        assert result["id"] != holder_id
        assert url_queue.get_job(result["id"]).payload == {"who": "second"}


def test_url_queue_gives_one_job_per_key_to_concurrent_callers(create_database):
    url = create_database()
    queue = _url_queue(url)
    keys, threads, calls = 10, 6, 60
    results: list[list[tuple[str, int]]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads)

    def enqueue_all(thread: int) -> None:
        start.wait()
        for n in range(calls):
            key = f"order:{(n + thread * 7) % keys}"
            if n % 3:
                job_id = queue.enqueue("send_email", {"from": thread}, idempotency_key=key)
            else:
                job_id = queue.enqueue_many([
                    {"task": "send_email", "payload": {}, "idempotency_key": key},
                    {"task": "send_email", "payload": {}, "idempotency_key": f"order:{(n + 1) % keys}"},
                ])[0]
            results[thread].append((key, job_id))

    try:
        workers = [threading.Thread(target=enqueue_all, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=120)
        with queue.engine.connect() as conn:
            total = conn.execute(text("SELECT count(*) FROM sqla_queue_jobs")).scalar_one()
    finally:
        queue.engine.dispose()

    ids_by_key: dict[str, set[int]] = defaultdict(set)
    for key, job_id in (call for thread in results for call in thread):
        ids_by_key[key].add(job_id)
    assert sum(map(len, results)) == threads * calls
    assert all(len(ids) == 1 for ids in ids_by_key.values())
    assert total == keys


# -- connections that broke while they sat in the pool ----------------------------------------


def _terminate_pooled_connection(queue: sq.Queue, admin) -> int:
    with queue.engine.connect() as conn:  # the pool's only connection, reused next
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
    with admin.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": pid})
    return pid


def _backend_pid(queue: sq.Queue) -> int:
    with queue.engine.connect() as conn:
        return conn.execute(text("SELECT pg_backend_pid()")).scalar_one()


def test_a_connection_the_server_terminated_is_replaced_before_the_next_enqueue(
    url_queue, engine, count_jobs, monkeypatch
):
    monkeypatch.setattr(_engine, "PING_IF_IDLE_FOR", 3600.0)  # "used a moment ago": no idle ping
    url_queue.enqueue("send_email", {})
    settle(url_queue)
    old_pid = _terminate_pooled_connection(url_queue, engine)

    url_queue.enqueue("send_email", {"secret": "hunter2"})

    assert count_jobs() == 2
    assert _backend_pid(url_queue) != old_pid


def test_a_connection_idle_past_the_ping_threshold_is_pinged_before_use(url_queue, monkeypatch):
    """What a silently dropped connection needs: nothing on its socket, so only the idle ping
    finds out. The ping is a round trip of its own before the INSERT; within the threshold
    there is none (the enqueue is its one Sync)."""
    url_queue.enqueue("send_email", {})
    trace = Trace(url_queue)

    monkeypatch.setattr(_engine, "PING_IF_IDLE_FOR", 3600.0)
    _, recent = trace(lambda: url_queue.enqueue("send_email", {}))
    monkeypatch.setattr(_engine, "PING_IF_IDLE_FOR", 0.0)
    _, idle = trace(lambda: url_queue.enqueue("send_email", {}))

    assert recent == ["Sync"]
    assert _engine.PROBE in idle and idle[-1] == "Sync"  # the probe, then the INSERT


def test_a_connection_that_dies_during_an_enqueue_fails_that_call_only(url_queue, engine, count_jobs):
    """The backend dies in the middle of the INSERT (a trigger terminates it): that call raises
    a DatabaseError with the connection invalidated and no payload in it (not retried: an
    INSERT that reached the server may have committed), and the next call reconnects."""
    url_queue.enqueue("send_email", {})
    with engine.begin() as conn:
        conn.execute(text(
            "CREATE FUNCTION sqlaq_test_die() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.payload ? 'die' THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF; "
            "RETURN NEW; END $$"
        ))
        conn.execute(text(
            "CREATE TRIGGER sqlaq_test_die BEFORE INSERT ON sqla_queue_jobs "
            "FOR EACH ROW EXECUTE FUNCTION sqlaq_test_die()"
        ))
    try:
        with pytest.raises(sq.DatabaseError) as failed:
            url_queue.enqueue("send_email", {"die": True, "secret": "hunter2"})
        assert failed.value.connection_invalidated
        assert "hunter2" not in str(failed.value)
        url_queue.enqueue("send_email", {})
    finally:
        with engine.begin() as conn:
            conn.execute(text("DROP TRIGGER sqlaq_test_die ON sqla_queue_jobs"))
            conn.execute(text("DROP FUNCTION sqlaq_test_die()"))
    assert count_jobs() == 2


# -- idempotency-key plugins, looked up once per call -----------------------------------------


class KeyFromPayload:
    """Keys payloads that carry an ``order``; no opinion otherwise."""

    def __init__(self) -> None:
        self.calls = 0

    @sq.hookimpl
    def sqla_queue_idempotency_key(self, task, payload, options):
        self.calls += 1
        return f"plugin:{task}:{payload['order']}:{options['queue']}" if "order" in payload else None


class KeyFromPayloadFirst(KeyFromPayload):
    @sq.hookimpl(tryfirst=True)
    def sqla_queue_idempotency_key(self, task, payload, options):
        return super().sqla_queue_idempotency_key(task, payload, options)


def _keys(job_row, ids):
    return [job_row(i)["idempotency_key"] for i in ids]


def test_per_task_keys_plugin_keys_and_explicit_keys_in_one_batch(engine, clean_jobs, job_row):
    plugin = KeyFromPayload()
    queue = sq.Queue(engine, load_entrypoints=False, plugins=[plugin])
    queue.task(lambda payload, ctx: None, name="plain")
    queue.task(lambda payload, ctx: None, name="keyed", idempotency_key=lambda p: f"task:{p['n']}" if "n" in p else None)

    ids = queue.enqueue_many([
        {"task": "plain", "payload": {}},
        {"task": "keyed", "payload": {"n": 1}},
        {"task": "keyed", "payload": {"order": 5}},  # the task says nothing: the plugin decides
        {"task": "plain", "payload": {"order": 6}, "queue": "q2"},
        {"task": "keyed", "payload": {"n": 2}, "idempotency_key": "explicit"},
    ])
    single = queue.enqueue("plain", {"order": 7})

    assert _keys(job_row, [*ids, single]) == [
        None, "task:1", "plugin:keyed:5:default", "plugin:plain:6:q2", "explicit", "plugin:plain:7:default",
    ]
    assert plugin.calls == 4  # never asked when an explicit key was given


def test_the_per_task_option_is_asked_before_even_a_tryfirst_plugin(engine, clean_jobs, job_row):
    queue = sq.Queue(engine, load_entrypoints=False, plugins=[KeyFromPayloadFirst()])
    queue.task(lambda payload, ctx: None, name="keyed", idempotency_key=lambda p: "task-key" if "n" in p else None)
    ids = queue.enqueue_many([
        {"task": "keyed", "payload": {"order": 1}},
        {"task": "keyed", "payload": {"n": 1, "order": 2}},
    ])
    assert _keys(job_row, ids) == ["plugin:keyed:1:default", "task-key"]


def test_a_plugin_registered_after_the_queue_was_built_is_asked(engine, clean_jobs, job_row):
    queue = sq.Queue(engine, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="plain")
    before = queue.enqueue("plain", {"order": 1})
    queue.plugin_manager.register(KeyFromPayload(), name="late")
    after = queue.enqueue_many([{"task": "plain", "payload": {"order": 2}}])
    assert _keys(job_row, [before, *after]) == [None, "plugin:plain:2:default"]


def test_a_bad_key_from_a_plugin_or_task_names_it_and_writes_nothing(engine, clean_jobs, count_jobs):
    class Bad:
        @sq.hookimpl
        def sqla_queue_idempotency_key(self, payload):
            return 42 if payload.get("bad") else None

    queue = sq.Queue(engine, load_entrypoints=False, plugins=[Bad()])
    queue.task(lambda payload, ctx: None, name="plain")
    queue.task(lambda payload, ctx: None, name="keyed", idempotency_key=lambda p: "")

    with pytest.raises(sq.PluginError, match=r"returned 42 from sqla_queue_idempotency_key"):
        queue.enqueue_many([{"task": "plain", "payload": {}}, {"task": "plain", "payload": {"bad": True}}])
    with pytest.raises(sq.PluginError, match=r"idempotency_key of task 'keyed' returned str"):
        queue.enqueue_many([{"task": "plain", "payload": {}}, {"task": "keyed", "payload": {}}])
    assert count_jobs() == 0


def test_with_built_in_plugins_only_no_key_hook_is_called_for_a_task_without_a_key(engine):
    queue = sq.Queue(engine, load_entrypoints=False)
    assert queue.plugin_manager.hook.sqla_queue_idempotency_key.get_hookimpls() == []
