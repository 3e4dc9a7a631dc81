"""The session statements (`sql.session`) as the pool hooks and the listener send them: built
with Core, rendered once with their constants inline."""

from __future__ import annotations

from sqla_queue.sql import session


def test_default_isolation_reads_the_session_setting():
    text = session.constant_text(session.default_isolation())
    assert text == "SELECT current_setting('default_transaction_isolation') AS level"


def test_worker_session_defaults_set_the_session_not_the_transaction():
    text = session.constant_text(session.worker_session_defaults())
    assert text == ("SELECT set_config('default_transaction_isolation', 'read committed', false) AS level, "
                    "set_config('plan_cache_mode', 'force_generic_plan', false) AS plans")


def test_the_probe_is_a_constant_query():
    assert session.constant_text(session.probe()) == "SELECT 1 AS alive"
