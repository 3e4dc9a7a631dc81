"""Fault injection: real worker processes (through the CLI) against PostgreSQL we can hurt.

* ``own_server`` — a PostgreSQL 18 from ``sqla_queue.testing.embedded_server`` that this session
  initdb's and starts on ``127.0.0.1:<free port>``, so tests may restart it, terminate its
  backends or put a proxy in front of it. The shared service is never touched that way.
* ``proxy_factory`` — `proxy.TcpProxy` instances in front of a server, closed at teardown.
* ``fault_app`` — a throwaway app module (``faultapp.py`` in ``tmp_path``) with one task,
  ``work``, whose handler records ``(job_id, attempt, pid, claim_token)`` in a side table in its
  own short transaction, then sleeps ``payload["sleep"]`` seconds; helpers to enqueue, start
  worker processes, poll the database and check the end-of-run invariants. Every process it
  started is killed at teardown, whatever the test's outcome. Its async twin, ``work_async``,
  is an ``async def`` handler doing the same through an AsyncEngine and ``asyncio.sleep``;
  ``fault_app(url, handler_kind="async")`` makes the app's helpers enqueue that one instead.
  ``work_tx`` and ``work_tx_async`` (kinds ``"transaction"`` and ``"transaction_async"``) record
  their run the same way, then write one row to ``effects`` inside ``ctx.transaction()``: the
  row commits with the job's completion or not at all. ``effects`` has no unique constraint, so a
  duplicate effect would be counted, not refused.

Nothing here sleeps to synchronise: waiting is `FaultApp.wait_until`, a polling loop with an
overall timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, exc as sa_exc, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

import sqla_queue as sq
from sqla_queue import migrations
from sqla_queue.testing import EmbeddedServer, embedded_server

from proxy import TcpProxy
from waiting import wait_until

WORKER_APP_NAME = "sqlaq-fault-worker"
SIDE_APP_NAME = "sqlaq-fault-side"

APP_SOURCE = '''
"""Throwaway app for the fault-injection tests (written by tests/worker/conftest.py)."""
import os
import time

import sqlalchemy as sa

import sqla_queue as sq

queue = sq.Queue(os.environ["APP_DATABASE_URL"], load_entrypoints=False)

# Side effects go through their own engine (and, in the proxy tests, straight to the server):
# they stand for the handler's effect on the outside world.
side = sa.create_engine(
    os.environ["APP_SIDE_DATABASE_URL"], pool_pre_ping=True, pool_size=2, max_overflow=20,
    connect_args={"connect_timeout": 2, "application_name": "%(side)s"},
)
RECORD = sa.text(
    "INSERT INTO side_effects (job_id, attempt, pid, claim_token) "
    "VALUES (:job_id, :attempt, :pid, :token) ON CONFLICT (job_id, claim_token) DO NOTHING"
)


def record(ctx):
    """One row per (job, claim) that ran the handler; a replayed insert adds nothing."""
    give_up = time.monotonic() + 30
    while True:
        try:
            with side.begin() as conn:
                conn.execute(RECORD, {"job_id": ctx.job_id, "attempt": ctx.attempt,
                                      "pid": os.getpid(), "token": ctx.claim_token})
            return
        except sa.exc.OperationalError:
            if time.monotonic() > give_up:
                raise
            time.sleep(0.1)


@queue.task(max_attempts=%(max_attempts)d, retry_delay=0.2)
def work(payload, ctx):
    record(ctx)
    time.sleep(payload.get("sleep", 0.002))
'''

# Appended to APP_SOURCE: `work`'s async twin. The worker runs it on its own event loop; its side
# effect goes through an AsyncEngine (same server, same application name), so the handler never
# blocks that loop, and a restarting server hits it as it hits the sync one.
ASYNC_APP_SOURCE = '''
import asyncio

from sqlalchemy.ext.asyncio import create_async_engine

side_async = create_async_engine(
    sa.engine.make_url(os.environ["APP_SIDE_DATABASE_URL"]).set(drivername="postgresql+psycopg_async"),
    pool_pre_ping=True, pool_size=2, max_overflow=20,
    connect_args={"connect_timeout": 2, "application_name": "%(side)s"},
)


RECORD_ASYNC = sa.text(
    "INSERT INTO side_effects (job_id, attempt, pid, claim_token, runner) "
    "VALUES (:job_id, :attempt, :pid, :token, :runner) ON CONFLICT (job_id, claim_token) DO NOTHING"
)


async def record_async(ctx):
    """`record` on the event loop, naming the asyncio task the handler runs in."""
    give_up = time.monotonic() + 30
    while True:
        try:
            async with side_async.begin() as conn:
                await conn.execute(RECORD_ASYNC, {"job_id": ctx.job_id, "attempt": ctx.attempt,
                                                  "pid": os.getpid(), "token": ctx.claim_token,
                                                  "runner": asyncio.current_task().get_name()})
            return
        except sa.exc.OperationalError:
            if time.monotonic() > give_up:
                raise
            await asyncio.sleep(0.1)


@queue.task(max_attempts=%(max_attempts)d, retry_delay=0.2)
async def work_async(payload, ctx):
    await record_async(ctx)
    await asyncio.sleep(payload.get("sleep", 0.002))
'''

# Appended after ASYNC_APP_SOURCE: handlers whose effect is a row written inside ctx.transaction().
# `hold` lets a test catch a run inside its block: payload["hold"] lists one gate file per attempt;
# an attempt with a gate, after its write, notes "inside" (in a transaction of its own) and waits
# for its gate file to exist; how its block ended is noted too: "committed", or the class name
# of the exception (LostClaimError, CancelledError, ...), which is then re-raised.
TX_APP_SOURCE = '''

EFFECT = sa.text(
    "INSERT INTO effects (job_id, attempt, pid, claim_token, runner) "
    "VALUES (:job_id, :attempt, :pid, :token, :runner)"
)
NOTE = sa.text(
    "INSERT INTO handler_notes (job_id, attempt, pid, claim_token, note) "
    "VALUES (:job_id, :attempt, :pid, :token, :note)"
)


def effect_row(ctx, runner=None):
    return {"job_id": ctx.job_id, "attempt": ctx.attempt, "pid": os.getpid(),
            "token": ctx.claim_token, "runner": runner}


def note(ctx, what):
    """A row in handler_notes, committed on the side engine whatever the handler's block does.
    Synchronous on purpose, in the async handler too: it is a note, written even while the
    handler's coroutine is being cancelled."""
    with side.begin() as conn:
        conn.execute(NOTE, {"job_id": ctx.job_id, "attempt": ctx.attempt, "pid": os.getpid(),
                            "token": ctx.claim_token, "note": what})


def gate(payload, ctx):
    """The file this run waits for inside its block (noting "inside" first), or None."""
    gates = payload.get("hold") or []
    if ctx.attempt > len(gates):
        return None
    note(ctx, "inside")
    return gates[ctx.attempt - 1]


@queue.task(max_attempts=%(max_attempts)d, retry_delay=0.2)
def work_tx(payload, ctx):
    record(ctx)
    try:
        with ctx.transaction() as session:
            session.execute(EFFECT, effect_row(ctx))
            path = gate(payload, ctx)
            while path is not None and not os.path.exists(path):
                time.sleep(0.02)
            time.sleep(payload.get("sleep", 0.002))
        if path is not None:
            note(ctx, "committed")
    except Exception as error:
        note(ctx, type(error).__name__)
        raise


@queue.task(max_attempts=%(max_attempts)d, retry_delay=0.2)
async def work_tx_async(payload, ctx):
    await record_async(ctx)
    try:
        async with ctx.transaction() as session:
            await session.execute(EFFECT, effect_row(ctx, asyncio.current_task().get_name()))
            path = gate(payload, ctx)
            while path is not None and not os.path.exists(path):
                await asyncio.sleep(0.02)
            await asyncio.sleep(payload.get("sleep", 0.002))
        if path is not None:
            note(ctx, "committed")
    except BaseException as error:  # asyncio.CancelledError included: the worker may cancel it
        note(ctx, type(error).__name__)
        raise
'''

HANDLER_TASKS = {"sync": "work", "async": "work_async"}
TX_TASKS = {"transaction": "work_tx", "transaction_async": "work_tx_async"}
ALL_TASKS = {**HANDLER_TASKS, **TX_TASKS}

SIDE_TABLE = """
CREATE TABLE side_effects (
    id bigserial PRIMARY KEY,
    job_id bigint NOT NULL,
    attempt integer NOT NULL,
    pid integer NOT NULL,
    claim_token text NOT NULL,
    runner text,  -- work_async: the name of the asyncio task it ran in; work: NULL
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (job_id, claim_token)
)
"""

# No unique constraint on job_id: a second committed effect of one job must be countable.
EFFECTS_TABLE = """
CREATE TABLE effects (
    id bigserial PRIMARY KEY,
    job_id bigint NOT NULL,
    attempt integer NOT NULL,
    pid integer NOT NULL,
    claim_token text NOT NULL,
    runner text  -- work_tx_async: the name of the asyncio task it ran in; work_tx: NULL
)
"""

NOTES_TABLE = """
CREATE TABLE handler_notes (
    id bigserial PRIMARY KEY,
    job_id bigint NOT NULL,
    attempt integer NOT NULL,
    pid integer NOT NULL,
    claim_token text NOT NULL,
    note text NOT NULL,
    noted_at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

MAX_ATTEMPTS = 25


# -- waiting ------------------------------------------------------------------------------


# -- our own PostgreSQL 18 ----------------------------------------------------------------


class OwnServer:
    """A PostgreSQL 18 on 127.0.0.1 and a free port (`sqla_queue.testing.embedded_server`) that
    tests may restart, and whose backends they may terminate."""

    SETTINGS = {"fsync": "off", "synchronous_commit": "off", "max_connections": "300"}

    def __init__(self, server: EmbeddedServer) -> None:
        self.server = server
        self.host = server.host
        self.port = server.port

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every backend is terminated, then the server comes back."""
        self.server.restart()

    def url(self, database: str = "postgres", **query: str) -> str:
        url = make_url(self.server.url).set(database=database)
        return url.update_query_dict(query).render_as_string(hide_password=False)

    def create_database(self) -> str:
        """A new database on this server, migrated; returns its URL."""
        return create_app_database(self.url(), make_database=True)

    def terminate_backends(self, database: str, application_name: str) -> int:
        """``pg_terminate_backend`` on every backend of `database` with that application name."""
        engine = create_engine(self.url(), poolclass=NullPool, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                return conn.execute(text(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = :db AND application_name = :app AND pid <> pg_backend_pid()"
                ), {"db": database, "app": application_name}).scalar_one()
        finally:
            engine.dispose()


def create_app_database(server_url: str, *, make_database: bool) -> str:
    """Create (optionally) and prepare a database: queue migrations plus the side table."""
    url = make_url(server_url)
    if make_database:
        name = f"sqlaq_fault_{os.urandom(6).hex()}"
        admin = create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
        url = url.set(database=name)
    engine = create_engine(url, poolclass=NullPool)
    with engine.begin() as conn:
        if make_database:
            migrations.upgrade(conn)
    with engine.begin() as conn:
        for table in (SIDE_TABLE, EFFECTS_TABLE, NOTES_TABLE):
            conn.execute(text(table))
    engine.dispose()
    return url.render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def own_server() -> Iterator[OwnServer]:
    with embedded_server(OwnServer.SETTINGS) as server:
        yield OwnServer(server)


@pytest.fixture
def proxy_factory() -> Iterator[Callable[[str, int], TcpProxy]]:
    proxies: list[TcpProxy] = []

    def make(host: str, port: int) -> TcpProxy:
        proxy = TcpProxy(host, port)
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()


# -- the app, its workers and its database ------------------------------------------------


@dataclass
class WorkerProcess:
    name: str
    process: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive():
            os.kill(self.pid, signum)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


class FaultApp:
    """One test's app: its database (as the test sees it directly), its workers, its checks."""

    worker_app_name = WORKER_APP_NAME

    def __init__(self, root: Path, direct_url: str, handler_kind: str = "sync") -> None:
        self.root = root
        self.direct_url = direct_url
        self.handler_kind = handler_kind
        self.task = ALL_TASKS[handler_kind]  # what `enqueue` and `enqueue_one` enqueue
        self.engine = create_engine(direct_url, poolclass=NullPool)
        self.workers: list[WorkerProcess] = []
        self._started = 0
        self.producer = sq.Queue(self.engine, load_entrypoints=False)
        for task in ALL_TASKS.values():  # the producer only names them
            self.producer.task(name=task, max_attempts=MAX_ATTEMPTS)(lambda payload, ctx: None)
        (root / "faultapp.py").write_text(
            (APP_SOURCE + ASYNC_APP_SOURCE + TX_APP_SOURCE)
            % {"side": SIDE_APP_NAME, "max_attempts": MAX_ATTEMPTS}
        )

    # -- jobs -----------------------------------------------------------------------

    def enqueue(self, count: int, *, sleep: float = 0.002, batch: int = 500, task: str | None = None,
                **options: Any) -> list[int]:
        """`count` jobs of `task` (default: this app's handler kind's task)."""
        ids: list[int] = []
        for start in range(0, count, batch):
            size = min(batch, count - start)
            ids += self.producer.enqueue_many(
                [{"task": task or self.task, "payload": {"sleep": sleep}, **options}] * size
            )
        return ids

    def runs(self, job_id: int) -> list[Any]:
        """The handler runs of one job: ``(pid, attempt)`` rows in order."""
        return self.query("SELECT pid, attempt FROM side_effects WHERE job_id = :id ORDER BY id",
                          {"id": job_id})

    def enqueue_one(self, *, sleep: float = 0.002, hold: Sequence[Path] = ()) -> int:
        """One job; `hold` (transaction kinds): gate files, one per attempt from the first;
        such an attempt notes "inside" in handler_notes and waits inside its block until its
        file exists."""
        payload: dict[str, Any] = {"sleep": sleep}
        if hold:
            payload["hold"] = [str(path) for path in hold]
        return self.producer.enqueue(self.task, payload)

    # -- workers --------------------------------------------------------------------

    def start_worker(self, *options: str, queue_url: str | None = None,
                     side_url: str | None = None) -> WorkerProcess:
        """``sqla-queue --app faultapp:queue worker --processes 1 <options>`` as a real process:
        one worker, whose pid the fault tests kill, stop and count."""
        self._started += 1
        name = f"worker-{self._started}"
        log_path = self.root / f"{name}.log"
        env = dict(os.environ)
        env.update(
            APP_DATABASE_URL=queue_url or self.queue_url(self.direct_url),
            APP_SIDE_DATABASE_URL=side_url or self.direct_url,
            PYTHONUNBUFFERED="1",
            PYTHONFAULTHANDLER="1",  # a fatal signal writes every thread's stack to the log
            SQLA_QUEUE_DISABLE_PLUGIN_AUTOLOAD="1",
        )
        command = [sys.executable, "-c", "from sqla_queue.cli import run; run()",
                   "--app", "faultapp:queue", "worker", "--processes", "1", *options]
        with open(log_path, "wb") as log:
            process = subprocess.Popen(command, cwd=self.root, env=env, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        worker = WorkerProcess(name, process, log_path)
        self.workers.append(worker)
        return worker

    @staticmethod
    def queue_url(url: str) -> str:
        """The URL workers use: tagged so their backends can be found in pg_stat_activity."""
        return make_url(url).update_query_dict({"application_name": WORKER_APP_NAME}).render_as_string(
            hide_password=False
        )

    def kill_all(self) -> None:
        for worker in self.workers:
            if worker.alive():
                try:
                    os.kill(worker.pid, signal.SIGCONT)
                    os.kill(worker.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                worker.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    # -- reading the database ---------------------------------------------------------

    def query(self, sql: str, params: dict | None = None, *, retry_for: float = 30) -> list[Any]:
        """Rows of `sql`; connection errors (a restarting server) are retried for a while."""
        give_up = time.monotonic() + retry_for
        while True:
            try:
                with self.engine.connect() as conn:
                    return conn.execute(text(sql), params or {}).all()
            except sa_exc.OperationalError:
                if time.monotonic() >= give_up:
                    raise
                time.sleep(0.1)

    def scalar(self, sql: str, params: dict | None = None) -> Any:
        return self.query(sql, params)[0][0]

    def status_counts(self) -> dict[str, int]:
        return dict(self.query("SELECT status, count(*) FROM sqla_queue_jobs GROUP BY status"))

    def completed(self) -> int:
        return self.scalar("SELECT count(*) FROM sqla_queue_jobs WHERE status = 'completed'")

    def started(self) -> int:
        return self.scalar("SELECT count(DISTINCT job_id) FROM side_effects")

    def wait_until(self, predicate: Callable[[], Any], timeout: float, what: str,
                   interval: float = 0.1) -> Any:
        def check() -> Any:
            for worker in self.workers:
                if worker.alive() is False and worker.process.returncode not in (0, -9, 143, None):
                    raise AssertionError(f"{worker.name} exited with {worker.process.returncode}:\n"
                                         f"{worker.log()[-3000:]}")
            return predicate()

        return wait_until(check, what, timeout=timeout, interval=interval)

    def wait_all_completed(self, total: int, timeout: float) -> None:
        self.wait_until(lambda: self.completed() >= total, timeout,
                        f"all {total} jobs to complete (now {self.status_counts()})", interval=0.2)

    def check_invariants(self, total: int, *, max_duplicates: int) -> dict[str, int]:
        """Every job completed, exactly one row each, each ran at least once, and re-runs are
        bounded by what the faults can explain. Returns the figures."""
        counts = self.status_counts()
        assert counts == {"completed": total}, counts
        rows = self.scalar("SELECT count(*) FROM sqla_queue_jobs")
        distinct = self.scalar("SELECT count(DISTINCT id) FROM sqla_queue_jobs")
        assert rows == distinct == total
        never_ran = self.scalar(
            "SELECT count(*) FROM sqla_queue_jobs j WHERE NOT EXISTS "
            "(SELECT 1 FROM side_effects s WHERE s.job_id = j.id)"
        )
        assert never_ran == 0, f"{never_ran} jobs completed without their handler running"
        unfinished_claims = self.scalar(
            "SELECT count(*) FROM sqla_queue_jobs WHERE completed_at IS NULL OR claim_token IS NULL"
        )
        assert unfinished_claims == 0
        runs = self.scalar("SELECT count(*) FROM side_effects")
        duplicated_jobs = self.scalar(
            "SELECT count(*) FROM (SELECT job_id FROM side_effects GROUP BY job_id HAVING count(*) > 1) d"
        )
        figures = {"jobs": total, "handler_runs": runs, "duplicates": runs - total,
                   "duplicated_jobs": duplicated_jobs}
        assert runs - total <= max_duplicates, figures
        if self.handler_kind == "async":
            # Each run was the job's own asyncio task on the worker's loop (the worker names it
            # after the job), not a handler thread awaiting a coroutine it was handed.
            elsewhere = self.query("SELECT job_id, runner FROM side_effects "
                                   "WHERE runner IS DISTINCT FROM 'sqla-queue-job-' || job_id LIMIT 5")
            assert elsewhere == [], elsewhere
        return figures

    def effects(self, job_id: int) -> list[Any]:
        """The committed effect rows of one job: ``(pid, attempt, claim_token)`` in order."""
        return self.query("SELECT pid, attempt, claim_token FROM effects WHERE job_id = :id ORDER BY id",
                          {"id": job_id})

    def notes(self, job_id: int) -> list[Any]:
        """What the handler noted about one job: ``(pid, attempt, claim_token, note)`` in order."""
        return self.query("SELECT pid, attempt, claim_token, note FROM handler_notes "
                          "WHERE job_id = :id ORDER BY id", {"id": job_id})

    def check_effects(self, total: int) -> dict[str, int]:
        """The handler transaction's promise, on top of `check_invariants`: exactly one committed
        effect row per job (counted, counted distinct, and looked for twice over), written by the
        very claim that completed the job. Returns the figures; ``discarded_runs`` are handler
        runs whose block wrote an effect that never committed (killed, or lost their claim)."""
        effect_rows = self.scalar("SELECT count(*) FROM effects")
        jobs_with_an_effect = self.scalar("SELECT count(DISTINCT job_id) FROM effects")
        duplicated = self.query("SELECT job_id, count(*) AS effects FROM effects GROUP BY job_id "
                                "HAVING count(*) > 1 ORDER BY job_id LIMIT 10")
        figures = {"effect_rows": effect_rows, "jobs_with_an_effect": jobs_with_an_effect,
                   "duplicate_effects": effect_rows - jobs_with_an_effect,
                   "discarded_runs": self.scalar(
                       "SELECT count(*) FROM side_effects s WHERE NOT EXISTS (SELECT 1 FROM effects e "
                       "WHERE e.job_id = s.job_id AND e.claim_token = s.claim_token)")}
        assert duplicated == [], f"jobs with more than one committed effect: {duplicated} ({figures})"
        assert effect_rows == jobs_with_an_effect == total, figures
        without = self.scalar("SELECT count(*) FROM sqla_queue_jobs j "
                              "WHERE NOT EXISTS (SELECT 1 FROM effects e WHERE e.job_id = j.id)")
        assert without == 0, f"{without} jobs completed without their effect"
        # The effect that committed is the completing claim's: same token, same attempt.
        stale = self.query(
            "SELECT e.job_id, e.attempt, e.pid, j.attempts, j.status FROM effects e "
            "LEFT JOIN sqla_queue_jobs j ON j.id = e.job_id WHERE j.id IS NULL OR j.status <> 'completed' "
            "OR e.claim_token <> j.claim_token OR e.attempt <> j.attempts LIMIT 10"
        )
        assert stale == [], f"effects committed by a claim that did not complete the job: {stale}"
        # work_tx_async's effects were written from the job's own asyncio task; work_tx's from a thread.
        misplaced = self.query(
            "SELECT e.job_id, j.task, e.runner FROM effects e JOIN sqla_queue_jobs j ON j.id = e.job_id "
            "WHERE (j.task = 'work_tx_async') <> (e.runner IS NOT DISTINCT FROM 'sqla-queue-job-' || e.job_id) "
            "LIMIT 5"
        )
        assert misplaced == [], misplaced
        return figures

    def logs(self, chars: int = 2000) -> str:
        """The tail of every worker's output, for failure messages."""
        return "\n".join(f"--- {w.name} pid {w.pid} rc={w.process.poll()}\n{w.log()[-chars:]}"
                         for w in self.workers)

    def close(self) -> None:
        self.kill_all()
        self.engine.dispose()


@pytest.fixture
def fault_app(tmp_path: Path) -> Iterator[Callable[..., FaultApp]]:
    """Factory: ``fault_app(direct_url, handler_kind="sync")`` writes the app module and returns
    a `FaultApp` whose jobs run the ``work`` task (``"sync"``) or its twin ``work_async``
    (``"async"``), or the handler-transaction tasks ``work_tx`` (``"transaction"``) and
    ``work_tx_async`` (``"transaction_async"``)."""
    apps: list[FaultApp] = []

    def make(direct_url: str, handler_kind: str = "sync") -> FaultApp:
        app = FaultApp(tmp_path, direct_url, handler_kind)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()


@pytest.fixture(params=sorted(HANDLER_TASKS))
def handler_kind(request: pytest.FixtureRequest) -> str:
    """``"async"`` and ``"sync"``: which of the fault app's twin tasks a test's jobs run."""
    return request.param


@pytest.fixture(params=sorted(TX_TASKS))
def tx_kind(request: pytest.FixtureRequest) -> str:
    """``"transaction"`` and ``"transaction_async"``: the fault app's tasks whose effect row is
    written inside ``ctx.transaction()``."""
    return request.param


@pytest.fixture
def session_app_url(create_database) -> str:
    """A fresh migrated database (with the side table) on the session's server."""
    return create_app_database(create_database(), make_database=False)
