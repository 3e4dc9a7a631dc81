"""The worker's own connections are made the way the application's engine makes its own
(connect_args, do_connect hooks, a creator, pool connect listeners), with the worker's
keepalives and connect bound on top; a driver other than psycopg 3 is refused at worker start,
while enqueueing through it keeps working. Real PostgreSQL, real worker threads and processes."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Integer, String, create_engine, event, exc as sa_exc, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import sqla_queue as sq
from sqla_queue.errors import ConfigurationError

from waiting import wait_until

SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))
LEASE = timedelta(seconds=6)  # call_timeout 1.5 s: keepalives every 2 s, connects bounded at 2 s


def backends(url: str) -> list[tuple[str, str]]:
    """(application_name, last query) of every other client session on `url`'s database (an
    autovacuum worker analysing the new database is not one)."""
    observer = create_engine(url, connect_args={"application_name": "observer"})
    try:
        with observer.connect() as conn:
            rows = conn.execute(text(
                "SELECT application_name, query FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend'"
            ))
            return [tuple(row) for row in rows]
    finally:
        observer.dispose()


def listening_and_claiming(url: str):
    rows = backends(url)
    listens = any(query.startswith("LISTEN") for _, query in rows)
    # pg_stat_activity keeps the first 1 kB of a query: the round's claim is past it
    claims = any("SKIP LOCKED" in query or query.startswith(("WITH completed_now AS", "WITH RECURSIVE completed_now AS"))
                 for _, query in rows)
    return rows if listens and claims else None


class IamTokens:
    """A ``do_connect`` hook like an IAM token provider's: a fresh password per connection."""

    def __init__(self) -> None:
        self.issued: list[str] = []
        self._counter = itertools.count(1)

    def __call__(self, dialect, connection_record, cargs, cparams) -> None:
        token = f"iam-token-{next(self._counter)}"
        cparams["password"] = token
        self.issued.append(token)


def shop_engine(url: str, tokens: IamTokens, **kwargs):
    """The application's engine: connect_args, a do_connect hook and a pool connect listener
    that leaves a transaction open (the worker must keep what it set)."""
    engine = create_engine(url, connect_args={"application_name": "shop-web"}, **kwargs)
    event.listen(engine, "do_connect", tokens)

    @event.listens_for(engine, "connect")
    def set_tenant(dbapi_connection, connection_record):
        cursor = dbapi_connection.cursor()
        cursor.execute("SELECT set_config('shop.tenant', 'acme', false)")
        cursor.close()

    return engine


@pytest.fixture
def run_worker():
    """Run workers on threads; stop and join them at teardown."""
    started = []

    def start(worker):
        runner = threading.Thread(target=worker.run, daemon=True)
        runner.start()
        started.append((worker, runner))
        return worker

    yield start
    for worker, runner in started:
        worker.stop()
        runner.join(15)


def test_worker_connections_keep_the_application_engines_settings(create_database, run_worker):
    url = create_database()
    tokens = IamTokens()
    engine = shop_engine(url, tokens)
    queue = sq.Queue(engine, load_entrypoints=False)
    # queues named: this queue has no task to find them from
    worker = run_worker(queue.worker(queues=["default"], concurrency=2, poll_interval=0.05, lease=LEASE))

    rows = wait_until(lambda: listening_and_claiming(url), "the worker to listen and claim")
    assert rows, backends(url)
    assert {name for name, _ in rows} == {"shop-web"}, rows  # the listener and the claims alike
    assert len(tokens.issued) >= len(rows)  # the hook ran for every one of them

    with worker.engine.connect() as conn:
        driver = conn.connection.driver_connection
        assert driver.info.password in tokens.issued
        assert conn.exec_driver_sql("SHOW shop.tenant").scalar_one() == "acme"  # the pool listener's
        assert conn.exec_driver_sql("SHOW application_name").scalar_one() == "shop-web"
        # ...and the worker's own settings on top: autocommit sessions that read committed.
        assert driver.autocommit is True
        assert conn.exec_driver_sql("SHOW default_transaction_isolation").scalar_one() == "read committed"
    engine.dispose()


def test_worker_connections_come_from_the_applications_creator(create_database, run_worker):
    url = create_database()
    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    made = []

    def creator():
        made.append(1)
        return psycopg.connect(conninfo, application_name="shop-creator")

    engine = create_engine("postgresql+psycopg://", creator=creator)
    queue = sq.Queue(engine, load_entrypoints=False)
    run_worker(queue.worker(queues=["default"], concurrency=1, poll_interval=0.05, lease=LEASE))

    rows = wait_until(lambda: listening_and_claiming(url), "the worker to listen and claim")
    assert rows, backends(url)
    assert {name for name, _ in rows} == {"shop-creator"}, rows
    assert len(made) >= len(rows)
    engine.dispose()


# -- the worker's own settings on a TCP connection ---------------------------------------


class Forwarder:
    """127.0.0.1:<port> forwarded to the test server (which may listen on a Unix socket only),
    so worker connections are TCP and carry keepalives."""

    def __init__(self, url: str) -> None:
        parsed = make_url(url)
        host = parsed.query.get("host") or parsed.host or "localhost"
        port = parsed.port or 5432
        self.target = (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}") if host.startswith("/") else (
            socket.AF_INET, (host, port))
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.url = parsed.set(host="127.0.0.1", port=self.port,
                              query={k: v for k, v in parsed.query.items() if k != "host"})
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            family, address = self.target
            upstream = socket.socket(family, socket.SOCK_STREAM)
            upstream.connect(address)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.server.close()


def test_worker_connections_get_keepalives_and_tcp_user_timeout(database_url):
    forwarder = Forwarder(database_url)
    engine = create_engine(forwarder.url, connect_args={"application_name": "shop-web"})
    try:
        worker = sq.Queue(engine, load_entrypoints=False).worker(lease=LEASE)
        with worker.engine.connect() as conn:
            fd = conn.connection.driver_connection.fileno()
            with socket.socket(fileno=os.dup(fd)) as sock:
                assert sock.family == socket.AF_INET
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 2
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 2000
            assert conn.exec_driver_sql("SHOW application_name").scalar_one() == "shop-web"
        worker.engine.dispose()
    finally:
        engine.dispose()
        forwarder.close()


def test_a_worker_connecting_first_never_leaves_the_application_a_half_set_up_dialect(create_database):
    """The worker's first connection and an application thread's, at once, on an engine that had
    never connected: SQLAlchemy sets the dialect up from the first connection, and the
    application thread must not see it half done. Setting it up is slowed to open the window.
    A database of its own, so no other test's worker is registered in it."""
    engine = create_engine(create_database(), pool_size=2)
    set_up = engine.dialect.initialize

    def slow_set_up(connection):
        time.sleep(0.5)
        set_up(connection)

    engine.dialect.initialize = slow_set_up
    queue = sq.Queue(engine, load_entrypoints=False)
    worker = queue.worker(lease=LEASE)
    first = threading.Thread(target=lambda: worker.engine.connect().close())
    try:
        first.start()
        time.sleep(0.1)
        assert queue.workers() == []  # raised AttributeError ('default_isolation_level')
        first.join(timeout=30)
    finally:
        worker.engine.dispose()
        engine.dispose()


def test_a_worker_connecting_first_leaves_no_idle_connection_in_the_applications_pool(create_database):
    url = create_database()
    engine = create_engine(url, pool_size=2)
    worker = sq.Queue(engine, load_entrypoints=False).worker(lease=LEASE)
    try:
        worker.engine.connect().close()
        worker.engine.dispose()
        assert engine.dialect.server_version_info is not None  # set up by that first connection
        assert backends(url) == []
    finally:
        engine.dispose()


def test_a_server_that_never_answers_fails_the_connect_at_the_workers_bound():
    """psycopg's own default would wait 130 s; the worker gives up after its bound (2 s here)."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never says a word
        port = silent.getsockname()[1]
        engine = create_engine(f"postgresql+psycopg://nobody@127.0.0.1:{port}/shop")
        worker = sq.Queue(engine, load_entrypoints=False).worker(lease=LEASE)
        with pytest.raises(sa_exc.OperationalError, match="connection attempt timed out after 2s"):
            with worker.engine.connect():
                pass
        engine.dispose()


# -- a psycopg2 application ----------------------------------------------------------------


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    item: Mapped[str] = mapped_column(String(50))


@pytest.fixture
def psycopg2_shop(create_database):
    url = make_url(create_database()).set(drivername="postgresql+psycopg2")
    engine = create_engine(url)
    Base.metadata.create_all(engine)
    queue = sq.Queue(engine, load_entrypoints=False)

    @queue.task
    def ship(payload, ctx):
        pass

    yield queue, engine
    engine.dispose()


def jobs(engine) -> list[tuple]:
    with engine.connect() as conn:
        return conn.execute(text(
            "SELECT id, status, attempts, locked_by FROM sqla_queue_jobs ORDER BY id")).all()


def test_a_psycopg2_application_enqueues_in_its_own_session(psycopg2_shop):
    queue, engine = psycopg2_shop
    with Session(engine) as session, session.begin():
        session.add(Order(id=1, item="teapot"))
        kept = queue.enqueue("ship", {"order": 1}, session=session)
    with Session(engine) as session:
        session.add(Order(id=2, item="kettle"))
        queue.enqueue("ship", {"order": 2}, session=session)
        session.rollback()
    alone = queue.enqueue("ship", {"order": 3})  # in a transaction of its own
    with Session(engine) as session:
        assert session.scalars(select(Order.id)).all() == [1]
    assert [row[0] for row in jobs(engine)] == [kept, alone]
    assert queue.get_job(kept).payload == {"order": 1}


def test_the_worker_refuses_a_psycopg2_engine_and_writes_nothing(psycopg2_shop):
    queue, engine = psycopg2_shop
    job_id = queue.enqueue("ship", {"order": 1})
    before = jobs(engine)
    with pytest.raises(ConfigurationError) as refused:
        queue.worker()
    message = str(refused.value)
    assert "the worker needs psycopg 3, and this engine uses postgresql+psycopg2" in message
    assert "queue.worker(engine=create_engine('postgresql+psycopg://...'))" in message
    assert "--database-url postgresql+psycopg://" in message
    assert jobs(engine) == before == [(job_id, "pending", 0, None)]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM sqla_queue_jobs_counters")).scalar_one() == 0

    # What the message says to do works: the worker connects through psycopg 3.
    psycopg3 = create_engine(engine.url.set(drivername="postgresql+psycopg"))
    summary = queue.worker(engine=psycopg3, poll_interval=0.05, lease=LEASE).run(until_empty=True)
    assert summary.completed == 1 and queue.get_job(job_id).status is sq.JobStatus.COMPLETED
    with pytest.raises(ConfigurationError, match="this engine uses postgresql\\+psycopg2"):
        sq.Queue(psycopg3, load_entrypoints=False).worker(engine=engine)
    psycopg3.dispose()


# -- the same through the CLI, in worker processes -------------------------------------------

SHOP_APP = textwrap.dedent(
    """
    import os

    from sqlalchemy import create_engine, event

    import sqla_queue as sq

    engine = create_engine(os.environ["SHOP_DATABASE_URL"], connect_args={"application_name": "shop-web"})


    @event.listens_for(engine, "do_connect")
    def iam_token(dialect, connection_record, cargs, cparams):
        cparams["password"] = "iam-token"
        with open(os.environ["SHOP_TOKEN_LOG"], "a") as log:
            log.write("issued\\n")


    queue = sq.Queue(engine, load_entrypoints=False)


    @queue.task
    def ship(payload, ctx):
        pass
    """
)


@pytest.fixture
def shop_dir(tmp_path):
    (tmp_path / "shop.py").write_text(SHOP_APP)
    return tmp_path


def shop_env(url, tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env.update(SHOP_DATABASE_URL=url, SHOP_TOKEN_LOG=str(tmp_path / "tokens.log"))
    return env


def test_a_cli_worker_connects_as_the_application_does(create_database, shop_dir):
    url = create_database()
    env = shop_env(url, shop_dir)
    env["SQLA_QUEUE_DATABASE_URL"] = url  # the app's own URL there too: the app's engine still serves
    process = subprocess.Popen([SCRIPT, "--app", "shop:queue", "worker", "--poll-interval", "0.05"],
                               cwd=shop_dir, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        rows = wait_until(lambda: listening_and_claiming(url), "the worker to listen and claim", timeout=60)
    finally:
        process.terminate()
        out, err = process.communicate(timeout=60)
    assert rows, (backends(url), err)
    assert {name for name, _ in rows} == {"shop-web"}, rows
    issued = (shop_dir / "tokens.log").read_text().splitlines()
    assert len(issued) >= len(rows)
    assert process.returncode == 0, err


def test_a_cli_worker_on_a_psycopg2_app_is_refused_with_the_fix(create_database, shop_dir):
    url = create_database()
    psycopg2_url = make_url(url).set(drivername="postgresql+psycopg2").render_as_string(hide_password=False)
    env = shop_env(psycopg2_url, shop_dir)
    enqueued = subprocess.run([SCRIPT, "--app", "shop:queue", "enqueue", "ship", '{"order": 1}'],
                              cwd=shop_dir, env=env, capture_output=True, text=True, timeout=120)
    assert enqueued.returncode == 0, enqueued.stderr
    result = subprocess.run([SCRIPT, "--app", "shop:queue", "worker", "--until-empty"], cwd=shop_dir,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "Error: the worker needs psycopg 3, and this engine uses postgresql+psycopg2" in result.stderr
    assert "Traceback" not in result.stderr
    engine = create_engine(url)
    assert jobs(engine) == [(int(enqueued.stdout), "pending", 0, None)]
    engine.dispose()
    fixed = subprocess.run([SCRIPT, "--app", "shop:queue", "--database-url", url, "worker", "--until-empty"],
                           cwd=shop_dir, env=env, capture_output=True, text=True, timeout=120)
    assert fixed.returncode == 0, fixed.stderr
    assert "completed 1" in fixed.stdout


def test_registration_the_limits_read_and_the_first_claim_share_one_connection(queue):
    """The worker's start puts one connection on its critical path: registering, reading the
    queue limits and claiming run on the round connection the claim loop keeps, and the
    listener (started meanwhile) connects on its own instead of taking that one from the pool."""
    runner = threading.current_thread()
    checkouts: list[int] = []
    before_the_first_job: list[list[int]] = []

    @queue.task(name="noop")
    def noop(payload, ctx):
        if not before_the_first_job:
            before_the_first_job.append(list(checkouts))

    queue.enqueue_many([{"task": "noop", "payload": {"n": n}} for n in range(20)])
    worker = queue.worker(concurrency=1, poll_interval=0.05)
    event.listen(worker.engine, "checkout", lambda dbapi, record, proxy: checkouts.append(dbapi.info.backend_pid)
                 if threading.current_thread() is runner else None)

    summary = worker.run(until_empty=True)

    assert summary.completed == 20
    assert len(before_the_first_job[0]) == 1, before_the_first_job
