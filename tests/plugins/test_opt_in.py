"""Installing a plugin distribution never changes what a Queue stores, deduplicates or retries.

The strategy plugins in plugins/ are installed (editable) in the test environment. Installed
but not enabled, a Queue behaves exactly as without them; enabled by each of the three ways
(``plugins=["name"]``, ``SQLA_QUEUE_PLUGINS``, ``sqla-queue --plugin NAME`` in a real CLI
process), they take effect. Unknown names are refused before anything is written.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest
from sqla_queue_content_hash import content_key
from sqla_queue_content_hash import plugin as content_hash
from sqla_queue_decorrelated_jitter import plugin as jitter
from sqlalchemy import text

import sqla_queue as sq
from sqla_queue.plugins.builtins import backoff
from sqla_queue.plugins.manager import BLOCKED_PLUGINS_ENV, DISABLE_AUTOLOAD_ENV, ENABLED_PLUGINS_ENV


def write_distribution(site, name: str, entry_point: str) -> None:
    """A real installed distribution (a dist-info directory on sys.path), as pip leaves one."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[sqla_queue]\n{entry_point}\n")


def spy_on_jitter(monkeypatch) -> list[tuple[int, int]]:
    """Record every time the installed jitter plugin is asked for a delay."""
    asked: list[tuple[int, int]] = []
    original = type(jitter).delay

    def delay(job_id, attempt):
        asked.append((job_id, attempt))
        return original(jitter, job_id, attempt)

    monkeypatch.setattr(jitter, "delay", delay)
    return asked


def fail_once(queue: sq.Queue, db_now, jobs: int = 5) -> list[tuple[int, object, object, object]]:
    """Enqueue `jobs` failing jobs, claim and fail each once: (id, before, run_at, after)."""
    queue.task(name="call_partner", queue="partner")(lambda payload, ctx: 1 / 0)
    for n in range(jobs):
        queue.enqueue("call_partner", {"n": n})
    results = []
    for job in queue.claim("partner", worker_id="w", limit=jobs):
        before = db_now()
        outcome = queue.handle_failure(job, ZeroDivisionError())
        results.append((job.id, before, outcome.run_at, db_now()))
    assert len(results) == jobs
    return results


# -- installed, not enabled: nothing changes ----------------------------------------------


def test_content_hash_installed_but_not_enabled_dedupes_nothing(installed_queue, count_jobs):
    queue = installed_queue()
    queue.task(name="send_receipt", queue="receipts")(lambda payload, ctx: None)
    ids = [queue.enqueue("send_receipt", {"order": 7}) for _ in range(17)]
    ids += queue.enqueue_many([{"task": "send_receipt", "payload": {"order": 7}}] * 3)
    assert len(set(ids)) == 20 and count_jobs() == 20
    assert {queue.get_job(job_id).idempotency_key for job_id in ids} == {None}


def test_jitter_installed_but_not_enabled_leaves_retries_to_the_builtin_backoff(installed_queue, db_now, monkeypatch):
    asked = spy_on_jitter(monkeypatch)
    queue = installed_queue()
    for _, before, run_at, after in fail_once(queue, db_now):
        assert before + backoff.delay_range(1)[0] <= run_at <= after + backoff.delay_range(1)[1]  # 7.5 s to 15 s
    assert asked == []
    impls = queue.plugin_manager.hook.sqla_queue_retry_delay.get_hookimpls()
    assert [impl.plugin_name for impl in impls if impl.plugin is jitter] == []


# -- enabled by name, three ways ----------------------------------------------------------


def assert_jitter_applied(results) -> None:
    for job_id, before, run_at, after in results:
        expected = jitter.delay(job_id, 1)
        assert before + expected <= run_at <= after + expected


def test_plugins_names_enable_the_strategy_plugins(installed_queue, db_now, count_jobs):
    queue = installed_queue(plugins=["decorrelated_jitter", "content_hash"])
    assert_jitter_applied(fail_once(queue, db_now))
    queue.task(name="send_receipt")(lambda payload, ctx: None)
    first = queue.enqueue("send_receipt", {"order": 7})
    assert all(queue.enqueue("send_receipt", {"order": 7}) == first for _ in range(16))
    assert queue.get_job(first).idempotency_key == content_key("send_receipt", {"order": 7})


def test_the_environment_variable_enables_them(installed_queue, db_now, monkeypatch):
    monkeypatch.setenv(ENABLED_PLUGINS_ENV, " decorrelated_jitter , content_hash")
    queue = installed_queue()
    assert_jitter_applied(fail_once(queue, db_now))
    queue.task(name="send_receipt")(lambda payload, ctx: None)
    assert queue.enqueue("send_receipt", {"order": 7}) == queue.enqueue("send_receipt", {"order": 7})


def test_the_environment_variable_is_enabling_even_with_autoload_off(installed_queue, monkeypatch):
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, "1")
    monkeypatch.setenv(ENABLED_PLUGINS_ENV, "content_hash")
    manager = installed_queue().plugin_manager
    assert manager.get_plugin("content_hash") is content_hash
    assert manager.get_plugin("prometheus") is None  # an observer loads on install only


def test_a_queue_built_without_entry_points_ignores_the_variable_and_says_so(engine, monkeypatch, caplog):
    monkeypatch.setenv(ENABLED_PLUGINS_ENV, "content_hash")
    queue = sq.Queue(engine, load_entrypoints=False)
    assert queue.plugin_manager.get_plugin("content_hash") is None
    assert "SQLA_QUEUE_PLUGINS=content_hash is ignored by a Queue built with load_entrypoints=False" in caplog.text


def cli(*args: str, cwd, extra_env=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in (BLOCKED_PLUGINS_ENV, DISABLE_AUTOLOAD_ENV, ENABLED_PLUGINS_ENV)}
    return subprocess.run([sys.executable, "-m", "sqla_queue.cli", *args], capture_output=True, text=True,
                          env={**env, **(extra_env or {})}, cwd=cwd, timeout=120)


@pytest.fixture
def cli_app(tmp_path, database_url, clean_jobs):
    """An application module whose Queue names no plugin: only the command line enables them."""
    (tmp_path / "shop_jobs.py").write_text(textwrap.dedent(f"""
        import sqla_queue as sq

        queue = sq.Queue({database_url!r})

        @queue.task(queue="receipts")
        def send_receipt(payload, ctx):
            pass

        @queue.task(queue="partner", max_attempts=5)
        def call_partner(payload, ctx):
            raise ConnectionError("partner down")
    """))
    return tmp_path


def test_the_cli_plugin_option_enables_content_hash_for_the_apps_queue(cli_app, count_jobs):
    def enqueue(*options):
        done = cli(*options, "--app", "shop_jobs:queue", "enqueue", "send_receipt", '{"order": 7}', cwd=cli_app)
        assert done.returncode == 0, done.stderr
        return int(done.stdout)

    assert enqueue() != enqueue()  # installed, not enabled: two jobs
    keyed = enqueue("--plugin", "content_hash")
    assert enqueue("--plugin", "content_hash") == keyed
    assert count_jobs() == 3


def test_the_cli_plugin_option_enables_the_jitter_for_a_worker(cli_app, engine, db_now):
    producer = sq.Queue(engine, load_entrypoints=False)
    producer.task(name="call_partner", queue="partner")(lambda payload, ctx: None)
    job_id = producer.enqueue("call_partner", {})
    before = db_now()
    done = cli("--plugin", "decorrelated_jitter", "--app", "shop_jobs:queue", "worker", "--queues", "partner",
               "--until-empty", "--no-listen", "--poll-interval", "0.05", cwd=cli_app)
    after = db_now()
    assert done.returncode == 0, done.stderr
    assert "retried 1" in done.stdout
    with engine.connect() as conn:
        run_at, attempts = conn.execute(text("SELECT run_at, attempts FROM sqla_queue_jobs WHERE id = :id"),
                                        {"id": job_id}).one()
    expected = jitter.delay(job_id, 1)
    assert attempts == 1 and before + expected <= run_at <= after + expected


# -- unknown names, single strings, blocks ------------------------------------------------


def installed_names() -> list[str]:
    """The entry points of the group, as the message lists them (plugins/ holds at least these)."""
    names = sorted(ep.name for ep in importlib.metadata.entry_points(group="sqla_queue"))
    assert {"content_hash", "decorrelated_jitter", "prometheus"} <= set(names)
    return names


def test_an_unknown_name_in_plugins_lists_the_installed_ones(engine, count_jobs, clean_jobs):
    with pytest.raises(sq.ConfigurationError) as raised:
        sq.Queue(engine, plugins=["contnet_hash"])
    message = str(raised.value)
    assert "plugins= names 'contnet_hash' (did you mean 'content_hash'?)" in message
    assert f"the installed entry points of the 'sqla_queue' group are: {', '.join(installed_names())}" in message
    assert count_jobs() == 0


def test_an_unknown_name_in_the_environment_names_the_variable(engine, monkeypatch):
    monkeypatch.setenv(ENABLED_PLUGINS_ENV, "content_hash,no_such_plugin")
    with pytest.raises(sq.ConfigurationError, match=rf"{ENABLED_PLUGINS_ENV} names 'no_such_plugin'"):
        sq.Queue(engine)


def test_an_unknown_cli_plugin_is_a_usage_error_that_writes_nothing(cli_app, count_jobs):
    done = cli("--plugin", "content_hsh", "--app", "shop_jobs:queue", "enqueue", "send_receipt", cwd=cli_app)
    assert done.returncode == 2
    assert "--plugin names 'content_hsh' (did you mean 'content_hash'?)" in done.stderr
    assert f"the installed entry points of the 'sqla_queue' group are: {', '.join(installed_names())}" in done.stderr
    assert count_jobs() == 0


def test_plugins_as_a_single_string_is_refused(engine):
    with pytest.raises(sq.ConfigurationError, match="plugins must be a list"):
        sq.Queue(engine, plugins="content_hash")


def test_blocking_beats_enabling(installed_queue, caplog):
    queue = installed_queue(plugins=["content_hash"], blocked_plugins=["content_hash"])
    assert queue.plugin_manager.get_plugin("content_hash") is None
    assert "plugin 'content_hash' is enabled by plugins= but blocked; blocking wins" in caplog.text


# -- classification is by the hooks a plugin implements -----------------------------------


def test_a_plugin_with_any_strategy_hook_is_opt_in_whatever_else_it_observes(engine, tmp_path, monkeypatch):
    (tmp_path / "sqlaq_mixed_plugin.py").write_text(textwrap.dedent("""
        import sqla_queue

        @sqla_queue.hookimpl
        def sqla_queue_job_completed(event):
            pass

        @sqla_queue.hookimpl
        def sqla_queue_is_retryable(error):
            return False
    """))
    write_distribution(tmp_path, "mixed-plugin", "mixed = sqlaq_mixed_plugin")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert sq.Queue(engine).plugin_manager.get_plugin("mixed") is None
    assert sq.Queue(engine, plugins=["mixed"]).plugin_manager.get_plugin("mixed") is not None


def test_an_observer_may_not_register_a_strategy_from_configure(engine, tmp_path, monkeypatch):
    (tmp_path / "sqlaq_sneaky_plugin.py").write_text(textwrap.dedent("""
        import sqla_queue

        class AlwaysKey:
            @sqla_queue.hookimpl
            def sqla_queue_idempotency_key(self, task):
                return "one"

        @sqla_queue.hookimpl
        def sqla_queue_configure(queue):
            queue.plugin_manager.register(AlwaysKey(), name="always_key")
    """))
    write_distribution(tmp_path, "sneaky-plugin", "sneaky = sqlaq_sneaky_plugin")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(sq.ConfigurationError, match=r"'sneaky', loaded on install as an observer, registered 'always_key'"):
        sq.Queue(engine)
    enabled = sq.Queue(engine, plugins=["sneaky"])  # enabled by name, it may
    assert enabled.plugin_manager.get_plugin("always_key") is not None


def test_a_misspelt_hook_in_an_installed_plugin_is_reported_not_left_available(engine, tmp_path, monkeypatch):
    (tmp_path / "sqlaq_typo_plugin.py").write_text(textwrap.dedent("""
        import sqla_queue

        @sqla_queue.hookimpl
        def sqla_queue_job_complete(event):
            pass
    """))
    write_distribution(tmp_path, "typo-plugin", "typo = sqlaq_typo_plugin")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(sq.ConfigurationError, match=r"'typo' of typo-plugin 1.0 implements sqla_queue_job_complete, which is no sqla_queue hook"):
        sq.Queue(engine)
