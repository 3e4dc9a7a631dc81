"""The plugin system against a real database: order of strategies, per-task options, blocking,
naming, and what a misbehaving plugin can and cannot do to a job."""

from __future__ import annotations

import functools
import logging
import sys
from datetime import timedelta

import pytest

import sqla_queue as sq
from sqla_queue.plugins.manager import (
    BLOCKED_PLUGINS_ENV,
    DISABLE_AUTOLOAD_ENV,
    build_plugin_manager,
    describe_plugins,
)
from sqla_queue.plugins.calls import idempotency_key_asker
from sqla_queue.plugins.builtins import backoff

BUILTINS = ["sqla_queue.backoff", "sqla_queue.retryable", "sqla_queue.logging"]


class FixedDelay:
    def __init__(self, delay):
        self.delay = delay

    @sq.hookimpl
    def sqla_queue_retry_delay(self):
        return self.delay


class FixedKey:
    def __init__(self, key):
        self.key = key
        self.calls = []

    @sq.hookimpl
    def sqla_queue_idempotency_key(self, task, payload, options):
        self.calls.append((task, dict(payload), dict(options)))
        return self.key


def fail_once(queue: sq.Queue, error: BaseException = RuntimeError("boom"), name: str = "send_email"):
    queue.enqueue(name, {"to": "x"})
    (job,) = queue.claim(queue.get_task(name).queue, worker_id="w")
    return job, queue.handle_failure(job, error)


# -- order of strategies ----------------------------------------------------------------


def test_an_explicit_backoff_is_asked_before_the_builtin(queue, engine):
    mine = sq.Queue(engine, plugins=[FixedDelay(timedelta(hours=2))], load_entrypoints=False)
    mine.task(name="send_email")(lambda p, c: None)
    job, outcome = fail_once(mine)
    assert outcome.status is sq.JobStatus.PENDING
    assert timedelta(hours=1, minutes=59) < outcome.run_at - job.locked_at < timedelta(hours=2, minutes=1)


def test_no_opinion_falls_through_to_the_builtin_default(queue, engine, db_now):
    mine = sq.Queue(engine, plugins=[FixedDelay(None)], load_entrypoints=False)
    mine.task(name="send_email")(lambda p, c: None)
    before = db_now()
    _, outcome = fail_once(mine)
    assert before <= outcome.run_at <= db_now() + backoff.ceiling(1)


def test_the_last_registered_explicit_plugin_is_asked_first(engine, clean_jobs):
    mine = sq.Queue(engine, plugins=[FixedDelay(timedelta(hours=1)), FixedDelay(timedelta(hours=3))],
                    load_entrypoints=False)
    mine.task(name="send_email")(lambda p, c: None)
    job, outcome = fail_once(mine)
    assert outcome.run_at - job.locked_at > timedelta(hours=2, minutes=59)


def test_false_from_the_backoff_fails_the_job_now(engine, clean_jobs):
    mine = sq.Queue(engine, plugins=[FixedDelay(False)], load_entrypoints=False)
    mine.task(name="send_email", max_attempts=5)(lambda p, c: None)
    job, outcome = fail_once(mine)
    assert outcome.status is sq.JobStatus.FAILED
    assert mine.get_job(job.id).attempts == 1


def test_a_retryable_plugin_can_fail_a_job_on_its_first_attempt(engine, clean_jobs):
    class NeverRetry:
        @sq.hookimpl
        def sqla_queue_is_retryable(self, error):
            return not isinstance(error, KeyError)

    mine = sq.Queue(engine, plugins=[NeverRetry()], load_entrypoints=False)
    mine.task(name="send_email")(lambda p, c: None)
    assert fail_once(mine, KeyError("gone"))[1].status is sq.JobStatus.FAILED
    assert fail_once(mine, ValueError("flaky"))[1].status is sq.JobStatus.PENDING


# -- per-task options -------------------------------------------------------------------


def test_a_task_retry_delay_beats_every_plugin(engine, clean_jobs):
    mine = sq.Queue(engine, plugins=[FixedDelay(timedelta(hours=3))], load_entrypoints=False)
    mine.task(name="send_email", retry_delay=timedelta(minutes=10))(lambda p, c: None)
    job, outcome = fail_once(mine)
    assert timedelta(minutes=9) < outcome.run_at - job.locked_at < timedelta(minutes=11)


def test_a_task_retry_delay_callable_gets_the_attempt_and_error_and_may_defer(engine, clean_jobs):
    seen = []

    def by_error(attempt, error):
        seen.append((attempt, type(error)))
        return timedelta(minutes=30) if isinstance(error, TimeoutError) else None

    mine = sq.Queue(engine, plugins=[FixedDelay(timedelta(hours=3))], load_entrypoints=False)
    mine.task(name="send_email", retry_delay=by_error)(lambda p, c: None)
    job, slow = fail_once(mine, TimeoutError())
    other, deferred = fail_once(mine, ValueError())
    assert seen == [(1, TimeoutError), (1, ValueError)]
    assert timedelta(minutes=29) < slow.run_at - job.locked_at < timedelta(minutes=31)
    assert deferred.run_at - other.locked_at > timedelta(hours=2, minutes=59)


def test_a_task_retry_delay_of_seconds_and_false(engine, clean_jobs):
    mine = sq.Queue(engine, load_entrypoints=False)
    mine.task(name="send_email", retry_delay=0)(lambda p, c: None)
    mine.task(name="resize", queue="images", retry_delay=lambda attempt, error: False)(lambda p, c: None)
    job, outcome = fail_once(mine)
    assert outcome.status is sq.JobStatus.PENDING and outcome.run_at - job.locked_at < timedelta(seconds=5)
    assert fail_once(mine, name="resize")[1].status is sq.JobStatus.FAILED


@pytest.mark.parametrize("bad", [-1, "soon", timedelta(seconds=-5)])
def test_a_bad_task_retry_delay_is_refused_at_registration(queue, bad):
    with pytest.raises(sq.ConfigurationError, match="retry_delay of task 'bad_task'"):
        queue.task(name="bad_task", retry_delay=bad)(lambda p, c: None)


def test_a_task_idempotency_key_function_beats_plugins_but_not_an_explicit_key(engine, clean_jobs):
    plugin = FixedKey("from-plugin")
    mine = sq.Queue(engine, plugins=[plugin], load_entrypoints=False)
    mine.task(name="receipt", idempotency_key=lambda payload: f"receipt:{payload['order']}")(lambda p, c: None)
    first = mine.enqueue("receipt", {"order": 7, "copy": 1})
    assert mine.enqueue("receipt", {"order": 7, "copy": 2}) == first
    assert mine.get_job(first).idempotency_key == "receipt:7"
    assert mine.enqueue("receipt", {"order": 7}, idempotency_key="explicit") != first
    assert plugin.calls == []


def test_a_task_idempotency_key_must_be_a_callable(queue):
    with pytest.raises(sq.ConfigurationError, match="must be a callable"):
        queue.task(name="keyed", idempotency_key="fixed")(lambda p, c: None)


def test_a_task_retry_delay_beats_even_a_tryfirst_plugin(engine, clean_jobs):
    class First(FixedDelay):
        @sq.hookimpl(tryfirst=True)
        def sqla_queue_retry_delay(self):
            return self.delay

    mine = sq.Queue(engine, plugins=[First(timedelta(hours=3))], load_entrypoints=False)
    mine.task(name="send_email", retry_delay=timedelta(0))(lambda p, c: None)
    job, outcome = fail_once(mine)
    assert outcome.run_at - job.locked_at < timedelta(seconds=5)


def test_a_broken_task_retry_delay_is_logged_and_the_plugins_decide(engine, clean_jobs, caplog):
    mine = sq.Queue(engine, plugins=[FixedDelay(timedelta(hours=3))], load_entrypoints=False)
    mine.task(name="send_email", retry_delay=lambda attempt, error: 1 / 0)(lambda p, c: None)
    with caplog.at_level(logging.ERROR, logger="sqla_queue.plugins"):
        job, outcome = fail_once(mine)
    assert outcome.run_at - job.locked_at > timedelta(hours=2, minutes=59)
    assert "retry_delay of task 'send_email' raised ZeroDivisionError" in caplog.text


# -- the idempotency hook -----------------------------------------------------------------


def test_the_idempotency_hook_gets_task_payload_and_resolved_options(engine, clean_jobs):
    plugin = FixedKey("k1")
    mine = sq.Queue(engine, plugins=[plugin], load_entrypoints=False)
    mine.task(name="resize", queue="images", max_attempts=2)(lambda p, c: None)
    first = mine.enqueue("resize", {"w": 10}, delay=timedelta(seconds=30))
    assert mine.enqueue("resize", {"w": 99}) == first
    assert plugin.calls[0] == ("resize", {"w": 10}, {
        "queue": "images", "max_attempts": 2, "run_at": None, "delay": timedelta(seconds=30)})


def test_an_explicit_key_means_the_hook_is_never_called(engine, clean_jobs):
    plugin = FixedKey("from-plugin")
    mine = sq.Queue(engine, plugins=[plugin], load_entrypoints=False)
    mine.task(name="send_email")(lambda p, c: None)
    mine.enqueue("send_email", {}, idempotency_key="mine")
    mine.enqueue_many([{"task": "send_email", "payload": {}, "idempotency_key": "mine-2"}])
    assert plugin.calls == []


@pytest.mark.parametrize("garbage", [42, "", b"bytes", ["k"]])
def test_a_garbage_key_is_an_error_naming_the_plugin_and_nothing_is_written(engine, clean_jobs, count_jobs, garbage):
    mine = sq.Queue(engine, plugins=[FixedKey(garbage)], load_entrypoints=False)
    mine.task(name="send_email")(lambda p, c: None)
    with pytest.raises(sq.PluginError, match=r"plugin 'test_plugin_manager\.FixedKey' returned"):
        mine.enqueue("send_email", {"secret": "s3cr3t"})
    assert count_jobs() == 0


def test_a_key_plugin_that_raises_is_an_error_naming_it(engine, clean_jobs, count_jobs):
    class Broken:
        @sq.hookimpl
        def sqla_queue_idempotency_key(self, payload):
            return payload["missing"]

    mine = sq.Queue(engine, plugins=[Broken()], load_entrypoints=False)
    mine.task(name="send_email")(lambda p, c: None)
    with pytest.raises(sq.PluginError, match=r"'test_plugin_manager\..*Broken' raised in sqla_queue_idempotency_key"):
        mine.enqueue("send_email", {})
    assert count_jobs() == 0


# -- misbehaving plugins never strand a job ------------------------------------------------


@pytest.mark.parametrize("garbage", [5, -timedelta(seconds=1), True, "1h"])
def test_a_garbage_delay_is_logged_by_name_and_the_other_plugins_retry_the_job(engine, clean_jobs, caplog, db_now, garbage):
    mine = sq.Queue(engine, plugins=[FixedDelay(garbage)], load_entrypoints=False)
    mine.task(name="send_email")(lambda p, c: None)
    before = db_now()
    with caplog.at_level(logging.ERROR, logger="sqla_queue.plugins"):
        job, outcome = fail_once(mine)
    assert outcome.status is sq.JobStatus.PENDING
    assert before <= outcome.run_at <= db_now() + backoff.ceiling(1)
    assert "'test_plugin_manager.FixedDelay' returned" in caplog.text
    assert "the other plugins decide for job" in caplog.text


def test_the_plugin_after_a_broken_one_decides_not_the_builtin(engine, clean_jobs, caplog):
    mine = sq.Queue(engine, plugins=[FixedDelay(timedelta(hours=3)), FixedDelay(5)], load_entrypoints=False)
    mine.task(name="send_email")(lambda p, c: None)
    with caplog.at_level(logging.ERROR, logger="sqla_queue.plugins"):
        job, outcome = fail_once(mine)
    assert outcome.run_at - job.locked_at > timedelta(hours=2, minutes=59)
    assert "'test_plugin_manager.FixedDelay#2' returned 5" in caplog.text


def test_a_broken_plugin_with_the_builtin_backoff_blocked_means_retry_at_once(engine, clean_jobs, caplog, monkeypatch):
    def forbidden(**kwargs):
        raise AssertionError("a blocked built-in was called")

    monkeypatch.setattr(backoff, "ceiling", forbidden)
    mine = sq.Queue(engine, plugins=[FixedDelay(5)], load_entrypoints=False, blocked_plugins=["sqla_queue.backoff"])
    mine.task(name="send_email")(lambda p, c: None)
    with caplog.at_level(logging.ERROR, logger="sqla_queue.plugins"):
        job, outcome = fail_once(mine)
    assert outcome.status is sq.JobStatus.PENDING
    assert outcome.run_at - job.locked_at < timedelta(seconds=5)
    assert "'test_plugin_manager.FixedDelay' returned 5" in caplog.text
    assert "sqla_queue.backoff" not in caplog.text  # never called, so it never raised


def test_blocking_the_builtin_retryable_means_every_error_is_retried(engine, clean_jobs):
    mine = sq.Queue(engine, load_entrypoints=False, blocked_plugins=["sqla_queue.retryable"])
    mine.task(name="send_email", retry_delay=0)(lambda p, c: None)
    assert fail_once(mine, sq.NonRetryableError("would fail with the built-in"))[1].status is sq.JobStatus.PENDING


def test_a_retryable_plugin_that_raises_is_logged_and_the_job_still_gets_an_outcome(engine, clean_jobs, caplog):
    class Broken:
        @sq.hookimpl
        def sqla_queue_is_retryable(self):
            raise ZeroDivisionError("oops")

    mine = sq.Queue(engine, plugins=[Broken()], load_entrypoints=False)
    mine.task(name="send_email", max_attempts=1)(lambda p, c: None)
    with caplog.at_level(logging.ERROR, logger="sqla_queue.plugins"):
        _, outcome = fail_once(mine)
    assert outcome.status is sq.JobStatus.FAILED  # last attempt: the default fails it
    assert "<locals>.Broken' raised in sqla_queue_is_retryable" in caplog.text


class Exploding:
    """Raises from every lifecycle hook."""

    @sq.hookimpl
    def sqla_queue_job_enqueued(self, event):
        raise RuntimeError("metrics backend down")

    @sq.hookimpl
    def sqla_queue_job_claimed(self, event):
        raise RuntimeError("metrics backend down")

    @sq.hookimpl
    def sqla_queue_job_completed(self, event):
        raise RuntimeError("metrics backend down")

    @sq.hookimpl
    def sqla_queue_job_retried(self, event):
        raise RuntimeError("metrics backend down")

    @sq.hookimpl
    def sqla_queue_job_failed(self, event):
        raise RuntimeError("metrics backend down")


class Counting:
    def __init__(self):
        self.seen = []

    @sq.hookimpl
    def sqla_queue_job_enqueued(self, event):
        self.seen.append("enqueued")

    @sq.hookimpl
    def sqla_queue_job_completed(self, event):
        self.seen.append("completed")

    @sq.hookimpl
    def sqla_queue_job_failed(self, event):
        self.seen.append("failed")


def test_a_lifecycle_plugin_that_raises_loses_no_job_and_starves_no_other_plugin(engine, clean_jobs, caplog, drain):
    counting = Counting()
    # Registered after Counting, so asked before it: its exceptions must not stop the call.
    mine = sq.Queue(engine, plugins=[counting, Exploding()], load_entrypoints=False)
    mine.task(name="ok", queue="explode")(lambda p, c: None)

    @mine.task(name="bad", queue="explode", max_attempts=2, retry_delay=timedelta(0))
    def bad(payload, ctx):
        raise ValueError("handler failed")

    ok_id, bad_id = mine.enqueue("ok", {}), mine.enqueue("bad", {})
    with caplog.at_level(logging.ERROR, logger="sqla_queue.plugins"):
        summary = drain(mine, "explode")
    assert mine.get_job(ok_id).status is sq.JobStatus.COMPLETED
    assert mine.get_job(bad_id).status is sq.JobStatus.FAILED
    assert mine.get_job(bad_id).attempts == 2
    assert summary.completed == 1 and summary.failed == 1
    assert sorted(counting.seen) == ["completed", "enqueued", "enqueued", "failed"]
    assert "'test_plugin_manager.Exploding' raised in sqla_queue_job_completed; ignored" in caplog.text
    assert "'test_plugin_manager.Exploding' raised in sqla_queue_job_retried; ignored" in caplog.text


def test_two_raising_instances_are_each_named_and_the_plugins_between_them_still_called(engine, clean_jobs, caplog):
    before, after = Counting(), Counting()
    mine = sq.Queue(engine, plugins=[after, Exploding(), before, Exploding()], load_entrypoints=False)
    mine.task(name="ok")(lambda p, c: None)
    with caplog.at_level(logging.ERROR, logger="sqla_queue.plugins"):
        mine.enqueue("ok", {})
    assert before.seen == after.seen == ["enqueued"]
    assert "'test_plugin_manager.Exploding#2' raised in sqla_queue_job_enqueued; ignored" in caplog.text
    assert "'test_plugin_manager.Exploding' raised in sqla_queue_job_enqueued; ignored" in caplog.text


# -- configure ----------------------------------------------------------------------------


def test_configure_hands_each_plugin_the_queue_once(engine):
    class Remembers:
        def __init__(self):
            self.queues = []

        @sq.hookimpl
        def sqla_queue_configure(self, queue):
            self.queues.append(queue)

    plugin = Remembers()
    built = sq.Queue(engine, plugins=[plugin], load_entrypoints=False)
    assert plugin.queues == [built]


def test_a_plugin_that_cannot_configure_stops_the_queue_with_its_name(engine):
    class Refuses:
        @sq.hookimpl
        def sqla_queue_configure(self):
            raise RuntimeError("no credentials for the metrics backend")

    with pytest.raises(sq.PluginError, match=r"'test_plugin_manager\..*Refuses' raised in sqla_queue_configure"):
        sq.Queue(engine, plugins=[Refuses()], load_entrypoints=False)


# -- registration, naming, blocking ----------------------------------------------------------


def test_builtins_are_ordinary_plugins_and_each_queue_has_its_own_manager(engine):
    first = sq.Queue(engine, plugins=[FixedDelay(None)], load_entrypoints=False)
    second = sq.Queue(engine, load_entrypoints=False)
    assert first.plugin_manager is not second.plugin_manager
    names = [info.name for info in describe_plugins(second.plugin_manager) if info.status == "enabled"]
    assert names == list(reversed(BUILTINS))
    assert "test_plugin_manager.FixedDelay" not in names


def test_explicit_plugins_get_readable_names_and_two_instances_both_register(engine):
    mine = sq.Queue(engine, plugins=[FixedDelay(None), FixedDelay(None), backoff], load_entrypoints=False)
    infos = {info.name: info for info in describe_plugins(mine.plugin_manager)}
    assert infos["test_plugin_manager.FixedDelay"].source == "explicit"
    assert infos["test_plugin_manager.FixedDelay#2"].hooks == ("sqla_queue_retry_delay",)
    assert infos["sqla_queue.backoff"].source == "builtin"  # the module is already registered


def test_blocked_plugins_by_argument_and_environment(engine, monkeypatch):
    monkeypatch.setenv(BLOCKED_PLUGINS_ENV, " sqla_queue.logging , ")
    mine = sq.Queue(engine, load_entrypoints=False, blocked_plugins=["sqla_queue.backoff"])
    infos = describe_plugins(mine.plugin_manager)
    loaded = [info.name for info in infos if not info.blocked]
    assert "sqla_queue.backoff" not in loaded and "sqla_queue.logging" not in loaded
    assert [(i.name, i.source) for i in infos if i.blocked] == [
        ("sqla_queue.backoff", "builtin"), ("sqla_queue.logging", "builtin")]


def test_blocking_the_builtin_backoff_means_retry_at_once(engine, clean_jobs):
    mine = sq.Queue(engine, load_entrypoints=False, blocked_plugins=["sqla_queue.backoff"])
    mine.task(name="send_email")(lambda p, c: None)
    job, outcome = fail_once(mine)
    assert outcome.run_at - job.locked_at < timedelta(seconds=5)


def test_a_blocked_name_that_matches_nothing_is_warned_about(engine, caplog):
    with caplog.at_level(logging.WARNING, logger="sqla_queue.plugins"):
        sq.Queue(engine, load_entrypoints=False, blocked_plugins=["sqla_queue.bakcoff"])
    assert "blocked plugin 'sqla_queue.bakcoff' matches no built-in or installed plugin" in caplog.text


def test_blocked_plugins_must_be_a_list(engine):
    with pytest.raises(sq.ConfigurationError, match="list of names"):
        sq.Queue(engine, load_entrypoints=False, blocked_plugins="sqla_queue.logging")


def test_a_misspelt_hook_fails_at_construction(engine):
    class Typo:
        @sq.hookimpl
        def sqla_queue_retry_dealy(self, job):
            return None

    with pytest.raises(sq.ConfigurationError, match="sqla_queue_retry_dealy"):
        sq.Queue(engine, plugins=[Typo()], load_entrypoints=False)


def test_an_argument_the_spec_does_not_have_fails_at_construction_naming_the_plugin(engine):
    class WrongArgument:
        @sq.hookimpl
        def sqla_queue_retry_delay(self, job, retries):
            return None

    with pytest.raises(sq.ConfigurationError, match=r"(?s)'test_plugin_manager\..*WrongArgument'.*retries"):
        sq.Queue(engine, plugins=[WrongArgument()], load_entrypoints=False)


def write_distribution(site, name: str, entry_point: str) -> None:
    """A real installed distribution (a dist-info directory on sys.path), as pip leaves one."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[sqla_queue]\n{entry_point}\n")


def test_an_entry_point_that_fails_to_import_names_itself_and_how_to_block_it(engine, tmp_path, monkeypatch):
    write_distribution(tmp_path, "broken-plugin", "broken = sqlaq_module_that_does_not_exist:plugin")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(sq.ConfigurationError, match=r"entry point 'broken' of broken-plugin 1.0 .*blocked_plugins=\['broken'\]"):
        sq.Queue(engine)
    assert "broken" in {i.name for i in describe_plugins(sq.Queue(engine, blocked_plugins=["broken"]).plugin_manager)}
    sq.Queue(engine, load_entrypoints=False)


def test_an_entry_point_module_is_loaded_when_the_queue_is_built_not_at_import(engine, tmp_path, monkeypatch):
    (tmp_path / "sqlaq_demo_plugin.py").write_text(
        "import sqla_queue\n"
        "@sqla_queue.hookimpl\n"
        "def sqla_queue_idempotency_key(task):\n"
        "    return 'demo:' + task\n"
    )
    write_distribution(tmp_path, "demo-plugin", "demo = sqlaq_demo_plugin")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "sqlaq_demo_plugin", raising=False)
    assert "sqlaq_demo_plugin" not in sys.modules
    manager = build_plugin_manager(load_entrypoints=True)
    infos = {info.name: info for info in describe_plugins(manager)}
    assert infos["demo"].source == "entry point" and infos["demo"].distribution == "demo-plugin 1.0"
    assert infos["demo"].status == "available"  # a strategy plugin: listed, loaded, not enabled
    assert manager.get_plugin("demo") is None
    monkeypatch.delitem(sys.modules, "sqlaq_demo_plugin")
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, "1")
    infos = {info.name: info for info in describe_plugins(build_plugin_manager(load_entrypoints=True))}
    assert infos["demo"].status == "available" and "not loaded" in infos["demo"].note
    assert "sqlaq_demo_plugin" not in sys.modules


# -- hook wrappers are refused ---------------------------------------------------------------


class OldStyleWrapper:
    @sq.hookimpl(hookwrapper=True)
    def sqla_queue_retry_delay(self):
        yield


class NewStyleWrapper:
    @sq.hookimpl(wrapper=True)
    def sqla_queue_job_completed(self, event):
        return (yield)


@pytest.mark.parametrize(("plugin", "hook"), [
    (OldStyleWrapper(), "sqla_queue_retry_delay"), (NewStyleWrapper(), "sqla_queue_job_completed")])
def test_a_hook_wrapper_is_refused_at_registration_naming_plugin_and_hook(engine, plugin, hook):
    name = f"test_plugin_manager.{type(plugin).__name__}"
    with pytest.raises(sq.ConfigurationError, match=rf"plugin '{name}' implements {hook} as a hook wrapper"):
        sq.Queue(engine, plugins=[plugin], load_entrypoints=False)


def test_a_hook_wrapper_registered_later_is_refused_too(engine):
    mine = sq.Queue(engine, load_entrypoints=False)
    with pytest.raises(sq.ConfigurationError, match="plugin 'late' implements sqla_queue_job_completed as a hook wrapper"):
        mine.plugin_manager.register(NewStyleWrapper(), name="late")
    assert not mine.plugin_manager.has_plugin("late")


# -- no hook call per job when nothing implements it ---------------------------------------


def test_with_no_key_plugin_enqueue_calls_no_hook(engine, clean_jobs):
    mine = sq.Queue(engine, load_entrypoints=False)
    assert mine.plugin_manager.hook.sqla_queue_idempotency_key.get_hookimpls() == []
    asker = idempotency_key_asker(mine.plugin_manager)
    plain = mine.task(name="plain")(lambda p, c: None)
    keyed = mine.task(name="keyed", idempotency_key=lambda payload: f"k:{payload['n']}")(lambda p, c: None)
    assert asker(plain, {"n": 1}, "default", 5, None, None) is None
    assert asker(keyed, {"n": 1}, "default", 5, None, None) == "k:1"
    [job_id] = mine.enqueue_many([{"task": "keyed", "payload": {"n": 2}}])
    assert mine.get_job(job_id).idempotency_key == "k:2"


def test_a_task_key_function_beats_even_a_tryfirst_key_plugin(engine, clean_jobs):
    class First(FixedKey):
        @sq.hookimpl(tryfirst=True)
        def sqla_queue_idempotency_key(self, task, payload, options):
            return super().sqla_queue_idempotency_key(task, payload, options)

    plugin = First("from-plugin")
    mine = sq.Queue(engine, plugins=[plugin], load_entrypoints=False)
    mine.task(name="keyed", idempotency_key=lambda payload: "task-key" if payload else None)(lambda p, c: None)
    keyed, deferred = mine.enqueue("keyed", {"n": 1}), mine.enqueue("keyed", {})
    assert mine.get_job(keyed).idempotency_key == "task-key"
    assert mine.get_job(deferred).idempotency_key == "from-plugin"
    assert [call[1] for call in plugin.calls] == [{}]


def test_a_key_the_database_would_refuse_is_a_plugin_error_naming_the_plugin(engine, clean_jobs, count_jobs):
    mine = sq.Queue(engine, plugins=[FixedKey("x" * 513)], load_entrypoints=False)
    mine.task(name="send_email")(lambda p, c: None)
    with pytest.raises(sq.PluginError, match=r"'test_plugin_manager\.FixedKey' returned 'xxx"):
        mine.enqueue("send_email", {})
    assert count_jobs() == 0


def counted(method):
    """A decorator shared by several plugins: their implementations share its wrapper's code."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        return method(*args, **kwargs)

    return wrapper


class DecoratedQuiet:
    @sq.hookimpl
    @counted
    def sqla_queue_job_enqueued(self, event):
        pass


class DecoratedBroken:
    @sq.hookimpl
    @counted
    def sqla_queue_job_enqueued(self, event):
        raise RuntimeError("broken behind a decorator")


def test_a_raising_plugin_behind_a_shared_decorator_is_still_named(engine, clean_jobs, caplog):
    counting = Counting()
    mine = sq.Queue(engine, plugins=[counting, DecoratedQuiet(), DecoratedBroken()], load_entrypoints=False)
    mine.task(name="ok")(lambda p, c: None)
    with caplog.at_level(logging.ERROR, logger="sqla_queue.plugins"):
        mine.enqueue("ok", {})
    assert "'test_plugin_manager.DecoratedBroken' raised in sqla_queue_job_enqueued; ignored" in caplog.text
    assert counting.seen == ["enqueued"]
