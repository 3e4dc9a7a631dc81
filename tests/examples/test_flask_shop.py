"""docs/tutorial.md, run as a new user runs it, on examples/flask_shop.

The journey runs in a temporary copy of the repository, in a fresh virtualenv the tutorial
itself creates with ``pip install``: ``alembic init``, the documented env.py edit,
``sqla-queue alembic install``, autogenerate, ``alembic upgrade head``, the Flask development
server answering real HTTP, a CLI worker, ``jobs show`` and ``stats``. Only the environment is
supplied: ``DATABASE_URL`` (a new database on the session's server) and ``FLASK_RUN_PORT``.
Between the tutorial's commands the test looks at the database and the files it produced.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from tutorial_runner import Terminal, apply_edit, blocks, missing_lines

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = REPO / "docs" / "tutorial.md"
EXAMPLE = REPO / "examples" / "flask_shop"
BLOCKS = blocks(TUTORIAL.read_text())
APP = "sqla-queue --app shop.jobs:queue"


def commands_of(kind: str) -> list[str]:
    return [c.line for b in BLOCKS if b.kind == kind for c in b.commands]


def test_every_block_of_the_tutorial_is_marked_and_every_command_parsed():
    assert [b for b in BLOCKS if b.kind not in ("shell", "server", "edit", "excerpt")] == []
    on_page = [line[2:] for line in TUTORIAL.read_text().splitlines() if line.startswith("$ ")]
    assert sorted(on_page) == sorted(commands_of("shell") + commands_of("server"))
    journey = commands_of("shell")
    for step in ("alembic init migrations", "sqla-queue alembic install --config alembic.ini",
                 "alembic revision --autogenerate -m orders", "alembic upgrade head", "alembic check",
                 f"{APP} worker --until-empty", f"{APP} jobs show 2", f"{APP} stats"):
        assert step in journey
    assert journey[0] == "cd examples/flask_shop" and journey[-1] == f"{APP} stats"


def test_the_tutorial_quotes_the_example_verbatim():
    excerpts = [b for b in BLOCKS if b.kind == "excerpt"]
    assert len(excerpts) >= 3
    for block in excerpts:
        assert block.body in (REPO / block.target).read_text(), f"{block.target} no longer says:\n{block.body}"


def test_the_example_readme_commands_are_the_tutorials():
    readme = (EXAMPLE / "README.md").read_text()
    commands = [line[2:] for line in readme.splitlines() if line.startswith("$ ")]
    assert commands and set(commands) <= set(commands_of("shell") + commands_of("server"))
    assert "docs/tutorial.md" in readme


# -- the journey --------------------------------------------------------------------------------


def clone_copy(root: Path) -> Path:
    """What a clone holds that the tutorial uses: the distribution (top-level files and the
    package) and the example, without anything a local run left behind."""
    clone = root / "clone"
    clone.mkdir()
    for path in REPO.iterdir():
        if path.is_file():
            shutil.copy(path, clone)
    junk = shutil.ignore_patterns("__pycache__", "*.egg-info", ".venv", "migrations", "alembic.ini")
    shutil.copytree(REPO / "sqla_queue", clone / "sqla_queue", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(EXAMPLE, clone / "examples" / "flask_shop", ignore=junk)
    return clone


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def user_environment(database_url: str, port: int) -> dict[str, str]:
    """This environment as a user's shell would have it: none of the test run's virtualenv or
    sqla_queue settings, plus the two variables the tutorial asks for."""
    ours = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SQLA_QUEUE_", "VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != ours)
    env.update(DATABASE_URL=database_url, FLASK_RUN_PORT=str(port))
    return env


def wait_for_port(port: int, server: Terminal, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert server.process.poll() is None, f"the server's terminal exited:\n{server.printed_so_far()}"
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on port {port} after {timeout} s:\n{server.printed_so_far()}")


class Journey:
    """The tutorial's blocks in order, with the test's own checks after some commands."""

    def __init__(self, clone: Path, database_url: str) -> None:
        self.clone = clone
        self.shop = clone / "examples" / "flask_shop"
        self.port = free_port()
        self.env = user_environment(database_url, self.port)
        self.engine = create_engine(database_url)
        self.shell = Terminal(clone, self.env)
        self.server: Terminal | None = None
        self.printed: dict[str, str] = {}

    def run(self) -> None:
        for block in BLOCKS:
            if block.kind == "shell":
                for command in block.commands:
                    timeout = 900 if command.line.startswith("pip ") else 180
                    status, output = self.shell.run(command.line, timeout)
                    assert status == 0, f"`{command.line}` exited {status}:\n{output}"
                    assert missing_lines(command.expected, output) == [], f"`{command.line}` printed:\n{output}"
                    self.printed[command.line] = output
                    self.check_after(command.line)
            elif block.kind == "server":
                self.start_server(block)
            elif block.kind == "edit":
                apply_edit(self.shop / block.target, block.body)

    def start_server(self, block) -> None:
        self.server = Terminal(self.clone, self.env)
        for command in block.commands:
            self.server.type(command.line)
        wait_for_port(self.port, self.server)
        expected = [line for command in block.commands for line in command.expected]
        deadline = time.monotonic() + 10
        while missing_lines(expected, self.server.printed_so_far()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert missing_lines(expected, self.server.printed_so_far()) == [], self.server.printed_so_far()

    def check_after(self, command: str) -> None:
        if command.startswith("pip install"):
            self.check_installed_from_the_clone()
        elif command == "alembic revision --autogenerate -m orders":
            self.check_revisions_are_the_hosts()
        elif command.startswith("curl -s -X POST"):
            self.check_one_transaction()

    def in_venv(self, *args: str) -> str:
        """A command of the tutorial's virtualenv, for the test's own look around."""
        env = {**self.env, "PATH": f"{self.shop / '.venv' / 'bin'}{os.pathsep}{self.env['PATH']}"}
        result = subprocess.run(args, cwd=self.shop, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"{args} exited {result.returncode}:\n{result.stdout}{result.stderr}"
        return result.stdout

    def check_installed_from_the_clone(self) -> None:
        """The commands that follow are the tutorial virtualenv's, with sqla_queue from the copy."""
        found = self.in_venv("python", "-c", "import flask, sqla_queue, shutil; print(sqla_queue.__file__);"
                             "print(shutil.which('sqla-queue')); print(shutil.which('alembic'))")
        package, cli, alembic = found.split()
        assert Path(package).is_relative_to(self.shop / ".venv")
        assert Path(cli).parent == Path(alembic).parent == self.shop / ".venv" / "bin"

    def check_revisions_are_the_hosts(self) -> None:
        """Both revisions are in the shop's versions directory, one line of history; nothing
        was written inside the installed package."""
        versions = sorted(p.name for p in (self.shop / "migrations" / "versions").glob("*.py"))
        assert len(versions) == 2, versions
        install, orders = sorted(versions, key=lambda name: name.endswith("_orders.py"))
        assert "install_sqla_queue_schema" in install and orders.endswith("_orders.py")
        orders_text = (self.shop / "migrations" / "versions" / orders).read_text()
        assert "create_table('orders'" in orders_text.replace('"', "'")
        assert "sqla_queue_jobs" not in orders_text
        assert len(self.in_venv("alembic", "heads").strip().splitlines()) == 1
        shipped = self.in_venv("python", "-c", "import sqla_queue.migrations as m; print(m.VERSION_LOCATION)").strip()
        packaged = {p.name for p in Path(shipped).glob("*.py")}
        assert packaged == {p.name for p in (REPO / "sqla_queue" / "migrations" / "versions").glob("*.py")}

    def check_one_transaction(self) -> None:
        """The order and both jobs were written by one transaction (one xmin), before any worker."""
        with self.engine.connect() as conn:
            order_xmin = conn.execute(text("SELECT xmin::text FROM orders WHERE id = 1")).scalar_one()
            jobs = conn.execute(text("SELECT task, status, xmin::text FROM sqla_queue_jobs ORDER BY id")).all()
        assert [(task, status) for task, status, _ in jobs] == [("send_receipt", "pending"), ("charge_card", "pending")]
        assert {xmin for *_, xmin in jobs} == {order_xmin}

    def close(self) -> None:
        for terminal in (self.server, self.shell):
            if terminal is not None:
                terminal.close()
        self.engine.dispose()


@pytest.fixture
def journey(tmp_path: Path, create_database):
    journey = Journey(clone_copy(tmp_path), create_database(migrate=False))
    yield journey
    journey.close()


def test_the_tutorial_runs_as_written(journey: Journey):
    journey.run()

    with journey.engine.connect() as conn:
        mailed, paid = conn.execute(text("SELECT receipt_mailed_at IS NOT NULL, paid_at IS NOT NULL FROM orders")).one()
        jobs = conn.execute(text("SELECT id, task, status, attempts FROM sqla_queue_jobs ORDER BY id")).all()
    assert (mailed, paid) == (True, False)
    assert [tuple(job) for job in jobs] == [(1, "send_receipt", "completed", 1), (2, "charge_card", "failed", 1)]

    shown = journey.printed[f"{APP} jobs show 2"]
    for part in ("failed", "charge_card", "NonRetryableError: the card was declined",
                 "Traceback (most recent call last)", "CardDeclined", "partner.py"):
        assert part in shown, f"`jobs show 2` does not show {part!r}:\n{shown}"

    # The worker was told no queues: it served both the shop's tasks declare.
    stats = json.loads(journey.in_venv(*APP.split(), "stats", "--json"))
    counts = {name: (c["pending"], c["running"], c["completed"], c["failed"]) for name, c in stats.items()}
    assert counts == {"default": (0, 0, 0, 1), "emails": (0, 0, 1, 0)}
    assert journey.printed[f"{APP} stats"].count("default") >= 2

    assert journey.in_venv("alembic", "check").strip() == "No new upgrade operations detected."


# -- the shop's own input checks, in process ------------------------------------------------------


@pytest.fixture
def shop(create_database, monkeypatch):
    """The example's Flask app on a new database with the queue's schema and the orders table."""
    monkeypatch.setenv("DATABASE_URL", create_database())
    monkeypatch.syspath_prepend(str(EXAMPLE))
    from shop.app import app
    from shop.db import engine
    from shop.models import Base

    Base.metadata.create_all(engine)
    yield app.test_client(), engine
    engine.dispose()
    for name in [name for name in sys.modules if name == "shop" or name.startswith("shop.")]:
        del sys.modules[name]


@pytest.mark.parametrize(("body", "message"), [
    ("not json", "send a JSON object"),
    ([1, 2], "send a JSON object"),
    ({"total": "19.90"}, "email must be"),
    ({"email": "ada@example.com"}, "total must be a decimal"),
    ({"email": "ada@example.com", "total": "abc"}, "total must be a decimal"),
    ({"email": "ada@example.com", "total": "NaN"}, "total must be positive"),
    ({"email": "ada@example.com", "total": "-1"}, "total must be positive"),
    ({"email": "ada@example.com", "total": "1.234"}, "at most two decimals"),
    ({"email": "ada@example.com", "total": "100000000"}, "below 100,000,000"),
])
def test_a_bad_order_is_a_400_that_writes_nothing(shop, body, message):
    client, engine = shop
    kwargs = {"data": body} if isinstance(body, str) else {"json": body}
    response = client.post("/orders", **kwargs)
    assert response.status_code == 400
    assert message in response.get_json()["error"]
    with engine.connect() as conn:
        written = conn.execute(text("SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM sqla_queue_jobs)"))
        assert written.one() == (0, 0)


def test_an_unknown_order_is_a_404(shop):
    client, _ = shop
    response = client.get("/orders/99")
    assert (response.status_code, response.get_json()) == (404, {"error": "no order 99"})
