"""Way in no. 1: ``sqla-queue db`` for applications without an Alembic environment of their own,
run as a user would run it (the installed console script, the URL in the environment)."""

from __future__ import annotations

import pytest
from migration_helpers import HEAD_ID, PREVIOUS_ID, Shell, relations, stamped
from sqlalchemy import create_engine, text

from sqla_queue import migrations


@pytest.fixture
def engine(empty_url):
    engine = create_engine(empty_url)
    yield engine
    engine.dispose()


def output(shell: Shell, command: str) -> str:
    return shell.run(command).stdout.strip()


def test_upgrade_current_downgrade_round_trip(shell: Shell, engine):
    assert output(shell, "sqla-queue db current") == "none"
    assert output(shell, "sqla-queue db upgrade") == f"sqla_queue schema at {HEAD_ID} (head)"
    assert output(shell, "sqla-queue db current") == f"{HEAD_ID} (head)"
    assert output(shell, "sqla-queue db downgrade") == f"sqla_queue schema at {PREVIOUS_ID}"
    assert stamped(engine) == {PREVIOUS_ID}
    assert output(shell, "sqla-queue db upgrade") == f"sqla_queue schema at {HEAD_ID} (head)"
    assert output(shell, "sqla-queue db downgrade sqla_queue@base") == "sqla_queue schema at none"
    assert relations(engine) == set()
    assert output(shell, "sqla-queue db upgrade sqlaq_0001") == "sqla_queue schema at sqlaq_0001"


def test_database_url_option_wins_over_the_environment(shell: Shell, empty_url: str):
    shell.env["SQLA_QUEUE_DATABASE_URL"] = "postgresql://nobody@127.0.0.1:1/nowhere"
    assert output(shell, f"sqla-queue --database-url '{empty_url}' db upgrade").endswith("(head)")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("not a url at all", "not a database URL"),
        ("mysql://root@localhost/app", "needs a postgresql:// URL"),
    ],
)
def test_a_bad_url_is_one_line_and_exit_2(shell: Shell, url: str, message: str):
    shell.env["SQLA_QUEUE_DATABASE_URL"] = url
    result = shell.run("sqla-queue db upgrade", check=False)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("Error: ")
    assert message in result.stderr


def test_an_unreachable_database_is_one_line_and_exit_1(shell: Shell):
    """The CLI's convention: the URL was fine, the database was the problem."""
    shell.env["SQLA_QUEUE_DATABASE_URL"] = "postgresql://postgres@127.0.0.1:1/nowhere"
    result = shell.run("sqla-queue db upgrade", check=False)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("Error: database: ")


def test_no_url_at_all_is_a_usage_error(shell: Shell):
    shell.env["SQLA_QUEUE_DATABASE_URL"] = ""
    result = shell.run("sqla-queue db current", check=False)
    assert result.returncode == 2
    assert "SQLA_QUEUE_DATABASE_URL" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("sqla-queue db upgrade sqlaq_9999", "Can't locate revision identified by 'sqlaq_9999'"),
        ("sqla-queue db downgrade", "nothing to downgrade"),
    ],
)
def test_alembic_refusals_are_one_line_and_exit_2(shell: Shell, command: str, message: str):
    result = shell.run(command, check=False)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr


def test_a_database_with_its_own_alembic_history_is_sent_to_that_history(shell: Shell, engine):
    """The bundled environment knows only the queue's revisions; Alembic would fail on the
    host's with a bare "Can't locate revision". Say what to do instead, and change nothing."""
    shell.run("sqla-queue db upgrade")
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO alembic_version (version_num) VALUES ('host_0001')"))
    for command in ("sqla-queue db upgrade", "sqla-queue db downgrade"):
        result = shell.run(command, check=False)
        assert result.returncode == 2
        assert "host_0001" in result.stderr and migrations.VERSION_RESOURCE in result.stderr
    assert output(shell, "sqla-queue db current") == f"{HEAD_ID} (head)"
    assert stamped(engine) == {"host_0001", HEAD_ID}
