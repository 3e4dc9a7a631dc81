"""The hot statements' compiled form kept on disk (`db.statement_cache`): a fresh process runs
them without building or compiling them, gets the same SQL SQLAlchemy would write, and never
reads an entry written for other code, another table or another server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import Column, MetaData, Text, TypeDecorator

import sqla_queue as sq
from sqla_queue.db.driver import DriverStatement
from sqla_queue.db.statement_cache import CACHE_ENV, StatementCache, package_fingerprint
from sqla_queue.db.statements import DriverStatements, Statements
from sqla_queue.models import Job
from sqla_queue.tables import job_table

ROUND = {"queues": ["default"], "tasks": None, "worker_id": "w", "limit": 3, "token": "t", "lease": None,
         "job_ids": [], "tokens": [], "results": []}


def _driver(engine, cache: StatementCache | None, table=Job.__table__) -> DriverStatements:
    return DriverStatements(Statements(table), engine.dialect, cache)


def _compiled_here(statement: DriverStatement) -> bool:
    return "_compiled" in statement.__dict__


@pytest.fixture
def warm_engine(engine):
    """The engine after its first connection, whose dialect knows the server (as on any use)."""
    with engine.connect():
        pass
    return engine


def test_the_next_process_runs_the_round_without_compiling_it_and_sends_the_same_sql(warm_engine, tmp_path):
    cache = StatementCache(tmp_path)
    first = _driver(warm_engine, cache).round
    restored = _driver(warm_engine, cache).round

    assert _compiled_here(first) and not _compiled_here(restored)
    for limit in (1, 3, 10, 500):  # a claim's LIMIT is written into the text: each its own
        assert restored.sql({**ROUND, "limit": limit}) == first.sql({**ROUND, "limit": limit})
    assert restored.values(ROUND) == first.values(ROUND)
    assert not _compiled_here(restored)


def test_a_restored_round_claims_and_completes_on_the_server(queue, warm_engine, tmp_path):
    cache = StatementCache(tmp_path)
    _driver(warm_engine, cache).round  # noqa: B018  the process that compiled and stored it
    round_statement = _driver(warm_engine, cache).round
    first, second = (queue.enqueue("send_email", {"n": n}) for n in (1, 2))

    with warm_engine.begin() as conn:
        claimed = {row.id: row for row in round_statement.rows(conn, {**ROUND, "limit": 5})}
    assert set(claimed) == {first, second}
    with warm_engine.begin() as conn:
        round_statement.rows(conn, {**ROUND, "limit": 0, "job_ids": [first],
                                    "tokens": [claimed[first].claim_token], "results": [None]})
    assert queue.get_job(first).status == "completed" and queue.get_job(second).status == "running"
    assert not _compiled_here(round_statement)


def test_an_enqueuing_process_reads_what_an_earlier_one_stored(database_url, clean_jobs, tmp_path):
    """Through ``$SQLA_QUEUE_STATEMENT_CACHE``, in fresh interpreters as scripts run: the first
    compiles the INSERT and the wake-up and stores them, the second compiles neither."""
    script = textwrap.dedent(f"""
        import sqla_queue as sq
        queue = sq.Queue({database_url!r}, load_entrypoints=False)
        queue.task(name="cached", queue="statement-cache")(lambda payload, ctx: None)
        queue.enqueue("cached", {{"n": 1}})
        fast = queue.core.executor._driver_statements
        print(sorted(name for name in ("insert_one_unless_fair", "wake_queues")
                     if "_compiled" in getattr(fast, name).__dict__))
        queue.engine.dispose()
    """)
    env = {**os.environ, CACHE_ENV: str(tmp_path / "statements")}

    def compiled_by_a_fresh_process() -> str:
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert compiled_by_a_fresh_process() == "['insert_one_unless_fair', 'wake_queues']"
    assert compiled_by_a_fresh_process() == "[]"
    assert len(list((tmp_path / "statements").glob("*.json"))) == 2


def test_another_table_or_server_version_has_entries_of_its_own(warm_engine, tmp_path):
    cache = StatementCache(tmp_path)
    dialect, order = warm_engine.dialect, Statements(Job.__table__).order
    other_table = job_table("other_jobs", MetaData())
    key = cache.key("complete_and_claim", Job.__table__, dialect, order, ROUND, ())

    assert key == cache.key("complete_and_claim", Job.__table__, dialect, order, ROUND, ())
    assert key != cache.key("complete_and_claim", other_table, dialect, order, ROUND, ())
    assert key != cache.key("complete_and_claim_from", Job.__table__, dialect, order, ROUND, ())
    real = dialect.server_version_info
    try:
        dialect.server_version_info = (real[0] + 1, 0)
        assert key != cache.key("complete_and_claim", Job.__table__, dialect, order, ROUND, ())
    finally:
        dialect.server_version_info = real
    extended = job_table("extended_jobs", MetaData())
    extended.append_column(Column("tenant", Text))
    assert cache.key("complete_and_claim", extended, dialect, order, ROUND, ()) != \
        cache.key("complete_and_claim", job_table("extended_jobs", MetaData()), dialect, order, ROUND, ())


class _Shouted(TypeDecorator):
    impl = Text
    cache_ok = True


def test_a_column_type_of_the_applications_own_is_compiled_every_time(warm_engine, tmp_path):
    """Its rendering may change with its code while its name stays: nothing is stored for it."""
    table = job_table("decorated_jobs", MetaData())
    table.append_column(Column("label", _Shouted))
    fast = _driver(warm_engine, StatementCache(tmp_path), table)

    assert fast.cache.key("insert_one", table, warm_engine.dialect, fast.statements.order, {}, ()) is None
    fast.insert_one  # noqa: B018
    assert list(tmp_path.iterdir()) == []


def test_an_edit_to_the_statement_code_starts_new_entries(tmp_path):
    package = tmp_path / "pkg"
    (package / "sql").mkdir(parents=True)
    (package / "dashboard").mkdir()
    (package / "states.py").write_text("A = 1\n")
    (package / "sql" / "claim.py").write_text("LIMIT = 1\n")
    (package / "dashboard" / "pages.py").write_text("TITLE = 'x'\n")
    before = package_fingerprint.__wrapped__(package)

    (package / "dashboard" / "pages.py").write_text("TITLE = 'yy'\n")
    assert package_fingerprint.__wrapped__(package) == before  # not statement code
    (package / "sql" / "claim.py").write_text("LIMIT = 22\n")
    edited = package_fingerprint.__wrapped__(package)
    assert edited != before
    (package / "sql" / "claim").mkdir()  # a subpackage's modules count too
    (package / "sql" / "claim" / "order.py").write_text("ORDER = 1\n")
    assert package_fingerprint.__wrapped__(package) != edited


def test_a_damaged_entry_is_compiled_again_and_written_whole(warm_engine, tmp_path):
    cache = StatementCache(tmp_path)
    _driver(warm_engine, cache).wake_queues  # noqa: B018
    [entry] = tmp_path.glob("*.json")
    entry.write_text('{"format": 1, "template": "SELECT')  # a writer cut off (or another program)

    again = _driver(warm_engine, cache).wake_queues
    assert _compiled_here(again)
    assert json.loads(entry.read_text())["template"] == again.sql({"queues": ["a"]})
    assert not _compiled_here(_driver(warm_engine, cache).wake_queues)


def test_off_or_an_unwritable_directory_compiles_as_before(warm_engine, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(CACHE_ENV, "off")
    assert StatementCache.configured() is None

    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    monkeypatch.setenv(CACHE_ENV, str(blocked))
    cache = StatementCache.configured()
    assert cache is not None and cache.named
    statement = _driver(warm_engine, cache).wake_queues
    assert statement.sql({"queues": ["a"]}).startswith("SELECT")
    assert f"{CACHE_ENV}={blocked} cannot be written" in caplog.text


def test_the_default_directory_is_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert StatementCache.configured().directory == Path(tmp_path) / "sqla_queue" / "statements"


def test_a_queue_built_from_a_url_uses_the_configured_cache(database_url, tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    queue = sq.Queue(database_url, load_entrypoints=False)
    try:
        assert queue.core.executor._driver_statements.cache.directory == tmp_path
    finally:
        queue.engine.dispose()


def test_a_directory_or_entry_others_can_write_is_not_read(warm_engine, tmp_path, caplog):
    """An entry is SQL the process runs: one that another user could have written is ignored
    (the statement is compiled, as without a cache), and the shared directory is named once."""
    shared = tmp_path / "shared"
    _driver(warm_engine, StatementCache(shared)).wake_queues  # noqa: B018  stores the entry
    [entry] = shared.glob("*.json")

    entry.chmod(0o666)
    assert _compiled_here(_driver(warm_engine, StatementCache(shared)).wake_queues)
    entry.chmod(0o600)
    assert not _compiled_here(_driver(warm_engine, StatementCache(shared)).wake_queues)

    shared.chmod(0o777)
    assert _compiled_here(_driver(warm_engine, StatementCache(shared)).wake_queues)
    assert f"statement cache {shared} is not private to this user" in caplog.text
