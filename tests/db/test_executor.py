"""The execution seam (`sqla_queue.db.executor`, through its documented internal interface): the
capabilities recorded when an engine is adopted decide the transaction mode, observed in
PostgreSQL as transaction ids (two statements in one transaction share one; two autocommit
statements get one each)."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, func, select

import sqla_queue as sq
from sqla_queue.db.engine import Capabilities
from sqla_queue.db.worker_engine import worker_engine

NEW_TRANSACTION_ID = select(func.txid_current())


def _transaction_ids(executor) -> tuple[int, int]:
    with executor.single_statement() as conn:
        return conn.execute(NEW_TRANSACTION_ID).scalar_one(), conn.execute(NEW_TRANSACTION_ID).scalar_one()


def test_a_url_built_queue_may_enqueue_in_autocommit_and_nothing_else_changes(database_url):
    queue = sq.Queue(database_url, load_entrypoints=False)
    try:
        assert queue.core.executor.capabilities == Capabilities(driver_fast_path=True, autocommit_enqueue=True)
        first, second = _transaction_ids(queue.core.executor)
        assert first == second  # single statements still get our own transaction
    finally:
        queue.engine.dispose()


def test_an_application_engine_never_gets_an_autocommit_path(engine):
    queue = sq.Queue(engine, load_entrypoints=False)
    assert queue.core.executor.capabilities == Capabilities(driver_fast_path=True)
    with queue.core.executor.autocommit_enqueue() as autocommit:
        assert autocommit is None
    first, second = _transaction_ids(queue.core.executor)
    assert first == second


def test_a_worker_engine_runs_single_statements_in_autocommit_at_read_committed(engine):
    queue = sq.Queue(engine, load_entrypoints=False)
    ours = worker_engine(engine, pool_size=1, call_timeout=5.0)
    try:
        on_worker = queue.on_engine(ours, call_timeout=5.0)
        assert on_worker.core.executor.capabilities == Capabilities(
            driver_fast_path=True, autocommit_single_statements=True
        )
        first, second = _transaction_ids(on_worker.core.executor)
        assert first != second  # each statement its own transaction: no BEGIN/COMMIT
        with on_worker.core.executor.single_statement() as conn:
            assert conn.execute(select(func.current_setting("transaction_isolation"))).scalar_one() == "read committed"
        with on_worker.core.executor.transaction() as conn:  # multi-statement work keeps a transaction
            assert conn.execute(NEW_TRANSACTION_ID).scalar_one() == conn.execute(NEW_TRANSACTION_ID).scalar_one()
    finally:
        ours.dispose()


def test_a_worker_engine_behind_a_transaction_pooler_reads_the_sessions_default_instead_of_setting_it(
    engine, database_url
):
    """Behind PgBouncer a session setting would not follow the next statement, so nothing is
    set: where the session already defaults to READ COMMITTED (PostgreSQL's default) single
    statements still run in autocommit; where it defaults to another level they get our own
    READ COMMITTED transaction, and the session keeps its default."""
    queue = sq.Queue(engine, load_entrypoints=False)
    serializable = create_engine(database_url, connect_args={"options": "-c default_transaction_isolation=serializable"})
    ours = worker_engine(engine, pool_size=1, call_timeout=5.0, prepared_statements=False)
    strict = worker_engine(serializable, pool_size=1, call_timeout=5.0, prepared_statements=False)
    try:
        executor = queue.on_engine(ours).core.executor
        assert executor.capabilities.autocommit_single_statements
        first, second = _transaction_ids(executor)
        assert first != second  # each statement its own transaction: no BEGIN/COMMIT

        executor = queue.on_engine(strict).core.executor
        first, second = _transaction_ids(executor)
        assert first == second
        with executor.single_statement() as conn:
            assert conn.execute(select(func.current_setting("transaction_isolation"))).scalar_one() == "read committed"
        with strict.connect() as conn:
            assert conn.execute(select(func.current_setting("default_transaction_isolation"))).scalar_one() == "serializable"
        for pooled in (ours, strict):
            with pooled.connect() as conn:
                assert conn.connection.driver_connection.prepare_threshold is None
    finally:
        ours.dispose()
        strict.dispose()
        serializable.dispose()


def test_on_engine_shares_tasks_plugins_and_statements_and_leaves_the_original_alone(engine, database_url):
    queue = sq.Queue(engine, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")
    other_engine = create_engine(database_url, pool_size=1)
    try:
        other = queue.on_engine(other_engine, call_timeout=2.5)
        assert other.task_names == queue.task_names == ["send_email"]
        assert other.plugin_manager is queue.plugin_manager
        assert other.core.executor.statements is queue.core.executor.statements  # built once per table
        assert (other.call_timeout, queue.call_timeout) == (2.5, None)
        assert other.engine.pool is other_engine.pool and queue.engine.pool is engine.pool
        queue.task(lambda payload, ctx: None, name="late")  # one registry: the copy sees it
        assert "late" in other.task_names
    finally:
        other_engine.dispose()


def test_the_listener_connection_listens_on_the_tables_channel_and_answers_the_probe(queue, engine):
    with queue.core.executor.listening(call_timeout=5.0) as driver:
        queue.enqueue("send_email", {})
        [note] = list(driver.notifies(timeout=5, stop_after=1))
        queue.core.executor.probe(driver, call_timeout=5.0)
    assert (note.channel, note.payload) == (queue.notify_channel, "default")


@pytest.mark.parametrize("job_id", [0, -3, True, "7", 1.0])
def test_one_job_id_rule_for_every_call(queue, job_id):
    for call in (queue.get_job, queue.cancel, queue.retry_now,
                 lambda j: queue.complete(j, "token"), lambda j: queue.list_jobs(before_id=j)):
        with pytest.raises(sq.InvalidInputError, match="must be"):
            call(job_id)


def test_a_connection_our_enqueues_left_in_autocommit_is_transactional_for_anyone_else(database_url, clean_jobs,
                                                                                       count_jobs):
    """One enqueue after another runs in autocommit on the same pooled connection, switched on
    once; whoever checks that connection out next for anything else (here the URL engine
    itself, as migrations on it would) gets transactions: its rolled-back write is gone."""
    queue = sq.Queue(database_url, load_entrypoints=False)
    queue.task(name="noop")(lambda payload, ctx: None)
    raw_engine = queue.core.executor.engine.engine  # the pool behind the READ COMMITTED view
    try:
        for _ in range(3):
            queue.enqueue("noop", {})
            queue.core.enqueuer.notifier.flush()  # the wake-ups' checkouts are done too
        assert raw_engine.pool.checkedin() >= 1
        with raw_engine.connect() as conn:
            assert conn.connection.driver_connection.autocommit is False
            with conn.begin() as transaction:
                conn.execute(sq.metadata.tables["sqla_queue_jobs"].delete())
                transaction.rollback()
        assert count_jobs() == 3
        queue.enqueue("noop", {})  # and the next enqueue is back in autocommit: committed alone
        assert count_jobs() == 4
    finally:
        queue.engine.dispose()
