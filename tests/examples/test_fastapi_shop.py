"""docs/how-to/asyncio.md, run as a user runs it, on examples/fastapi_shop.

The page's commands run in a temporary copy of the repository, in a virtualenv the page itself
creates with ``pip install`` (once for the module): the queue's and the shop's tables, uvicorn
serving the shop on a free port (``UVICORN_PORT``) against a new database (``DATABASE_URL``),
real HTTP requests with ``curl``, the worker in the server's lifespan, the server stopped with
Ctrl-C (SIGINT), then ``SHOP_WORKER=off`` with ``sqla-queue worker`` as separate processes.
Between the page's commands the test looks at the database: the order and its job committed in
one transaction, the async handler's mark on the order, nothing left by a failed request.

Three journeys replay the page from its start: up to the lifespan worker's receipt, up to the
rolled-back request, and all of it. Below them, the shop's own checks run in process.
"""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import socket
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from tutorial_runner import Block, Terminal, blocks, missing_lines

import sqla_queue as sq

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "how-to" / "asyncio.md"
EXAMPLE = REPO / "examples" / "fastapi_shop"
TEXT = PAGE.read_text()
BLOCKS = blocks(TEXT)
APP = "sqla-queue --app shop.jobs:queue"
WAIT = 60  # seconds for a job the page says runs "a moment later"


def blocks_before(heading: str) -> list[Block]:
    """The page's blocks up to the section `heading` (a whole heading line)."""
    return blocks(TEXT[: TEXT.index(f"\n{heading}\n")])


def commands_of(kind: str, page_blocks: list[Block] = BLOCKS) -> list[str]:
    return [c.line for b in page_blocks if b.kind == kind for c in b.commands]


# -- the page, read -------------------------------------------------------------------------


def test_every_block_of_the_page_is_marked_and_every_command_parsed():
    assert [b for b in BLOCKS if b.kind not in ("shell", "server", "excerpt")] == []
    on_page = [line[2:] for line in TEXT.splitlines() if line.startswith("$ ")]
    assert sorted(on_page) == sorted(commands_of("shell") + commands_of("server"))
    install = BLOCKS[0]
    assert install.kind == "shell" and [c.line for c in install.commands][:3] == [
        "cd examples/fastapi_shop", "python3 -m venv .venv", "source .venv/bin/activate"]
    for step in (f"{APP} db upgrade", "python -m shop.tables", f"{APP} worker --until-empty"):
        assert step in commands_of("shell")
    for server in ("uvicorn shop.app:app", "SHOP_WORKER=off uvicorn shop.app:app", f"{APP} worker"):
        assert server in commands_of("server")


def test_the_page_quotes_the_example_verbatim():
    excerpts = [b for b in BLOCKS if b.kind == "excerpt"]
    assert len(excerpts) >= 5
    for block in excerpts:
        assert block.body in (REPO / block.target).read_text(), f"{block.target} no longer says:\n{block.body}"


def test_the_example_readme_commands_are_the_pages():
    readme = (EXAMPLE / "README.md").read_text()
    commands = [line[2:] for line in readme.splitlines() if line.startswith("$ ")]
    assert commands and set(commands) <= set(commands_of("shell") + commands_of("server"))
    assert "docs/how-to/asyncio.md" in readme


def test_the_page_installs_what_the_test_extra_tested():
    """The page's lower bounds for FastAPI and uvicorn are the ones in the `test` extra."""
    [install] = [c for c in commands_of("shell") if c.startswith("pip install")]
    pyproject = (REPO / "pyproject.toml").read_text()
    for requirement in ("fastapi>=", "uvicorn>="):
        bound = install.split(requirement, 1)[1].split("'", 1)[0]
        assert f'"{requirement}{bound}"' in pyproject


# -- the journeys ---------------------------------------------------------------------------


def clone_copy(root: Path) -> Path:
    """What a clone holds that the page uses: the distribution and the example, without what
    a local run left behind."""
    clone = root / "clone"
    clone.mkdir()
    for path in REPO.iterdir():
        if path.is_file():
            shutil.copy(path, clone)
    shutil.copytree(REPO / "sqla_queue", clone / "sqla_queue", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(EXAMPLE, clone / "examples" / "fastapi_shop",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", ".venv"))
    return clone


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def user_environment(**variables: str) -> dict[str, str]:
    """This environment as a user's shell would have it: none of the test run's virtualenv or
    sqla_queue settings, plus the variables the page asks for."""
    ours = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SQLA_QUEUE_", "VIRTUAL_ENV", "PYTHON", "UVICORN_", "SHOP_", "DATABASE_URL"))}
    env["PATH"] = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != ours)
    env.update(variables)
    return env


def wait_until(condition, what: str, terminal: Terminal | None = None, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if terminal is not None:
            assert terminal.process.poll() is None, f"the terminal exited while waiting for {what}:\n" \
                                                    f"{terminal.printed_so_far()}"
        assert time.monotonic() < deadline, f"no {what} after {timeout} s" + (
            f":\n{terminal.printed_so_far()}" if terminal is not None else "")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """The copy of the repository with the shop installed by the page's first block."""
    clone = clone_copy(tmp_path_factory.mktemp("fastapi_shop"))
    shell = Terminal(clone, user_environment())
    try:
        for command in BLOCKS[0].commands:
            status, output = shell.run(command.line, 900)
            assert status == 0, f"`{command.line}` exited {status}:\n{output}"
    finally:
        shell.close()
    return clone


class Journey:
    """The page's blocks in order, in a new terminal of the installed clone, with the test's
    own checks after some commands."""

    def __init__(self, clone: Path, database_url: str) -> None:
        self.port = free_port()
        self.clone = clone
        self.env = user_environment(DATABASE_URL=database_url, UVICORN_PORT=str(self.port))
        self.engine = create_engine(make_url(database_url).set(drivername="postgresql+psycopg"))
        self.shell = Terminal(clone, self.env)
        self.server: Terminal | None = None
        self.lifespan = False  # whether the running server runs a worker in its lifespan
        self.worker: Terminal | None = None
        self.printed: dict[str, str] = {}
        for command in ("cd examples/fastapi_shop", "source .venv/bin/activate"):  # the page's first block
            self.run_command(command, [])

    def run(self, page_blocks: list[Block]) -> None:
        assert page_blocks[0].body == BLOCKS[0].body  # installed by the `clone` fixture
        for block in page_blocks[1:]:
            if block.kind == "shell":
                for command in block.commands:
                    self.run_command(command.line, command.expected)
            elif block.kind == "server":
                self.start(block)

    def run_command(self, line: str, expected: list[str]) -> None:
        status, output = self.shell.run(line, 180)
        assert status == 0, f"`{line}` exited {status}:\n{output}"
        assert missing_lines(expected, output) == [], f"`{line}` printed:\n{output}"
        self.printed[line] = output
        self.check_after(line)

    # -- terminals --------------------------------------------------------------------------

    def start(self, block: Block) -> None:
        last = block.commands[-1].line
        if "uvicorn" in last and self.server is not None:
            self.stop_server()  # "Stop the server with Ctrl-C and start it again"
        terminal = Terminal(self.clone, self.env)
        for command in block.commands:
            terminal.type(command.line)
        if "uvicorn" in last:
            self.server = terminal
            self.lifespan = not last.startswith("SHOP_WORKER=off ")
            wait_until(lambda: port_open(self.port), f"server on port {self.port}", terminal)
        else:
            assert last == f"{APP} worker", last
            self.worker = terminal
        expected = [line for command in block.commands for line in command.expected]
        wait_until(lambda: missing_lines(expected, terminal.printed_so_far()) == [], f"{expected}", terminal)

    def ctrl_c(self, terminal: Terminal, printed: str) -> str:
        """Ctrl-C in a terminal: SIGINT to its foreground command; what it printed by the
        time `printed` shows, whole lines of it."""
        os.killpg(terminal.process.pid, signal.SIGINT)
        wait_until(lambda: missing_lines([printed], terminal.printed_so_far()) == [], repr(printed), None)
        return terminal.printed_so_far()

    def stop_server(self) -> None:
        """The lifespan's shutdown cancels its worker: the worker says it stopped before uvicorn
        reports the shutdown complete, and nothing listens any more."""
        output = self.ctrl_c(self.server, "INFO:     Application shutdown complete.")
        if self.lifespan:
            assert missing_lines(["...sqla_queue.worker: worker ... stopped: ..."], output) == [], output
            lines = output.splitlines()
            stopped = next(i for i, line in enumerate(lines) if "sqla_queue.worker: worker" in line and "stopped" in line)
            assert stopped < next(i for i, line in enumerate(lines) if "Application shutdown complete" in line)
        wait_until(lambda: not port_open(self.port), "closed port")
        self.server.close()
        self.server = None

    # -- the test's own looks at the database -----------------------------------------------

    def check_after(self, command: str) -> None:
        if command == f"{APP} db upgrade":
            assert self.scalar("SELECT count(*) FROM sqla_queue_jobs") == 0
        elif command.startswith("curl -s -X POST"):
            email = command.split('"email": "', 1)[1].split('"', 1)[0]
            if "fail_after_enqueue=true" in command:
                self.check_nothing_written(email)
            else:
                self.check_order_placed(email)
        elif command == f"{APP} worker --until-empty":
            # Job 2, like order 2, was the failed request's, rolled back.
            assert self.jobs() == [(1, "completed"), (3, "completed")]
            assert self.receipts() == {1: True, 3: True}

    def scalar(self, sql: str, **params):
        with self.engine.connect() as conn:
            return conn.execute(text(sql), params).scalar_one()

    def jobs(self) -> list[tuple[int, str]]:
        with self.engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text("SELECT id, status FROM sqla_queue_jobs ORDER BY id"))]

    def receipts(self) -> dict[int, bool]:
        with self.engine.connect() as conn:
            rows = conn.execute(text("SELECT id, receipt_sent_at IS NOT NULL FROM orders ORDER BY id"))
            return dict(rows.all())

    def check_order_placed(self, email: str) -> None:
        """The order and its job were written by one transaction; then the job runs where the
        page says it does, and marks the order."""
        with self.engine.connect() as conn:
            order_id, order_created, order_xmin = conn.execute(
                text("SELECT id, created_at, xmin::text FROM orders WHERE email = :email"), {"email": email}).one()
            job = conn.execute(text("SELECT task, payload, created_at, xmin::text, status FROM sqla_queue_jobs "
                                    "WHERE (payload ->> 'order_id')::int = :id"), {"id": order_id}).one()
        assert (job.task, job.payload) == ("send_receipt", {"order_id": order_id})
        # now() is the transaction's start: a job and an order with the same one were written together.
        assert job.created_at == order_created
        if not self.lifespan and self.worker is None:
            assert (job.status, job.xmin) == ("pending", order_xmin)  # and nothing ran it
            return
        wait_until(lambda: self.receipts()[order_id], f"receipt for order {order_id}")
        wait_until(lambda: dict(self.jobs())[self.job_of(order_id)] == "completed", "completed job")
        runner = self.worker if self.worker is not None else self.server
        done = f"...completed job {self.job_of(order_id)} (send_receipt on default), attempt 1"
        wait_until(lambda: missing_lines([done], runner.printed_so_far()) == [], done, runner)

    def job_of(self, order_id: int) -> int:
        return self.scalar("SELECT id FROM sqla_queue_jobs WHERE (payload ->> 'order_id')::int = :id", id=order_id)

    def check_nothing_written(self, email: str) -> None:
        assert self.scalar("SELECT count(*) FROM orders WHERE email = :email", email=email) == 0
        assert self.scalar("SELECT count(*) FROM sqla_queue_jobs") == self.scalar("SELECT count(*) FROM orders")

    def close(self) -> None:
        for terminal in (self.worker, self.server, self.shell):
            if terminal is not None:
                terminal.close()
        self.engine.dispose()


@pytest.fixture
def journey(clone: Path, create_database, request):
    """A journey on a new, empty database; the parameter is the URL's driver as the user writes it."""
    url = make_url(create_database(migrate=False)).set(drivername=request.param)
    journey = Journey(clone, url.render_as_string(hide_password=False))
    yield journey
    journey.close()


@pytest.mark.parametrize("journey", ["postgresql"], indirect=True)
def test_the_lifespan_worker_runs_the_async_handler(journey: Journey):
    journey.run(blocks_before("### A failed request writes nothing"))
    assert journey.jobs() == [(1, "completed")]
    assert journey.receipts() == {1: True}


@pytest.mark.parametrize("journey", ["postgresql+psycopg"], indirect=True)
def test_a_failed_request_leaves_neither_order_nor_job(journey: Journey):
    journey.run(blocks_before("### Shutdown"))
    assert journey.jobs() == [(1, "completed")]
    assert journey.receipts() == {1: True}


@pytest.mark.parametrize("journey", ["postgresql+psycopg_async"], indirect=True)
def test_the_page_runs_as_written_with_a_separate_worker(journey: Journey):
    journey.run(BLOCKS)
    assert journey.jobs() == [(1, "completed"), (3, "completed"), (4, "completed")]
    assert journey.receipts() == {1: True, 3: True, 4: True}
    output = journey.ctrl_c(journey.worker, "claimed 1, completed 1, retried 0, failed 0, lost 0, released 0")
    assert "released 0" in output


# -- the shop in process --------------------------------------------------------------------


@pytest.fixture
def shop(create_database, monkeypatch):
    """The example's modules on a new database with the queue's table and the orders table,
    imported with SHOP_WORKER=off."""
    url = create_database()
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("SHOP_WORKER", "off")
    monkeypatch.syspath_prepend(str(EXAMPLE))
    _forget_shop()
    from shop import app, jobs
    from shop.models import Base

    engine = create_engine(url)
    Base.metadata.create_all(engine)
    yield app, jobs, engine
    engine.dispose()
    _forget_shop()


def _forget_shop() -> None:
    """examples/flask_shop's package has the same name."""
    for name in [name for name in sys.modules if name == "shop" or name.startswith("shop.")]:
        del sys.modules[name]


def test_the_shops_queue_refuses_sync_enqueue_as_the_page_says(shop):
    _, jobs, engine = shop
    with pytest.raises(sq.ConfigurationError):
        jobs.queue.enqueue(jobs.send_receipt, {"order_id": 1})
    with pytest.raises(sq.ConfigurationError):
        jobs.queue.stats()
    with pytest.raises(sq.ConfigurationError):
        jobs.queue.get_job(1)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM sqla_queue_jobs")).scalar_one() == 0


@pytest.mark.parametrize(("body", "field"), [
    ({"total": "19.90"}, "email"),
    ({"email": "not an address", "total": "19.90"}, "email"),
    ({"email": "ada@example.com"}, "total"),
    ({"email": "ada@example.com", "total": "abc"}, "total"),
    ({"email": "ada@example.com", "total": "NaN"}, "total"),
    ({"email": "ada@example.com", "total": "-1"}, "total"),
    ({"email": "ada@example.com", "total": "1.234"}, "total"),
    ({"email": "ada@example.com", "total": "100000000"}, "total"),
])
def test_a_bad_order_is_a_422_that_writes_nothing(shop, body, field):
    from fastapi.testclient import TestClient

    app, _, engine = shop
    with TestClient(app.app) as client:
        response = client.post("/orders", json=body)
        assert response.status_code == 422
        assert [error["loc"] for error in response.json()["detail"]] == [["body", field]]
        assert client.get("/orders/1").status_code == 404
        assert client.get("/orders/0").status_code == 422
        assert client.get(f"/orders/{2**31}").status_code == 422
    with engine.connect() as conn:
        written = conn.execute(text("SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM sqla_queue_jobs)"))
        assert written.one() == (0, 0)


def test_shop_worker_must_be_lifespan_or_off(shop, monkeypatch):
    monkeypatch.setenv("SHOP_WORKER", "threads")
    _forget_shop()
    with pytest.raises(RuntimeError, match="SHOP_WORKER must be lifespan or off"):
        importlib.import_module("shop.app")


def test_a_worker_given_an_engine_connects_its_way_and_runs_in_the_callers_loop(shop):
    """What the page's last section says: the worker of a queue on an AsyncEngine makes its own
    connections, the way the engine passed as ``worker(engine=...)`` makes them; its async
    handler runs in the loop that awaits ``run_async``, on the shop's own AsyncEngine."""
    import asyncio

    from sqlalchemy import event

    _, jobs, engine = shop
    from shop.db import Session, engine as shop_engine
    from shop.models import Order

    worker_engine = create_engine(engine.url, connect_args={"application_name": "shop-worker"})
    names: list[str] = []
    event.listen(worker_engine, "connect", lambda conn, _: names.append(conn.info.parameter_status("application_name")))

    async def place_and_drain():
        async with Session.begin() as session:
            order = Order(email="ada@example.com", total="19.90")
            session.add(order)
            await session.flush()
            await jobs.queue.enqueue_async(jobs.send_receipt, {"order_id": order.id}, session=session)
        try:
            return await jobs.queue.worker(engine=worker_engine, concurrency=2).run_async(until_empty=True)
        finally:
            await shop_engine.dispose()

    summary = asyncio.run(place_and_drain())
    worker_engine.dispose()
    assert (summary.claimed, summary.completed) == (1, 1)
    assert names and set(names) == {"shop-worker"}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT receipt_sent_at IS NOT NULL FROM orders")).scalar_one() is True


def test_an_order_reads_back_as_it_was_answered(shop):
    from fastapi.testclient import TestClient

    app, _, _ = shop
    with TestClient(app.app) as client:
        placed = client.post("/orders", json={"email": "ada@example.com", "total": 19.9})
        assert placed.status_code == 201
        assert placed.json() == {"id": 1, "email": "ada@example.com", "total": "19.90", "receipt_sent": False}
        assert client.get("/orders/1").json() == placed.json()
