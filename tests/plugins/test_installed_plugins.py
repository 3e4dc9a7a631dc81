"""The distributions in plugins/, installed in the test environment, reach a Queue through their
``sqla_queue`` entry points only, and each changes what a real run does once it takes part:
the observer (prometheus) on install, the strategy plugins (content_hash, decorrelated_jitter)
once enabled by name.

Nothing here imports a plugin package to register it: the Queue is built with
``load_entrypoints=True`` (and the names to enable) and the plugin object is fetched back from
its plugin manager under its entry-point name. tests/plugins/test_opt_in.py proves that an
installed strategy plugin nobody enabled changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import urllib.request
import uuid
from datetime import timedelta

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

import sqla_queue as sq
from sqla_queue.plugins.builtins import backoff
from sqla_queue.plugins.manager import BLOCKED_PLUGINS_ENV, DISABLE_AUTOLOAD_ENV, ENABLED_PLUGINS_ENV, describe_plugins

DISTRIBUTIONS = {
    "prometheus": ("sqla-queue-prometheus", "sqla_queue_prometheus"),
    "content_hash": ("sqla-queue-content-hash", "sqla_queue_content_hash"),
    "decorrelated_jitter": ("sqla-queue-decorrelated-jitter", "sqla_queue_decorrelated_jitter"),
    "sentry": ("sqla-queue-sentry", "sqla_queue_sentry"),
}
STRATEGIES = ["content_hash", "decorrelated_jitter"]


def loaded_from_entry_point(queue: sq.Queue, name: str, enabled_by: str = "plugins=") -> object:
    """The plugin registered under entry-point `name`, after checking where it came from and
    what enabled it (``installed`` for an observer)."""
    infos = {info.name: info for info in describe_plugins(queue.plugin_manager)}
    distribution, package = DISTRIBUTIONS[name]
    assert name in infos, f"{distribution} is not installed: the README's test command installs plugins/*"
    assert infos[name].source == "entry point"
    assert infos[name].distribution.startswith(f"{distribution} ")
    assert (infos[name].status, infos[name].enabled_by) == ("enabled", enabled_by)
    plugin = queue.plugin_manager.get_plugin(name)
    assert type(plugin).__module__.split(".")[0] == package
    return plugin


def test_every_plugin_distribution_is_loaded_through_its_entry_point(installed_queue):
    queue = installed_queue(plugins=STRATEGIES)
    loaded_from_entry_point(queue, "prometheus", enabled_by="installed")
    for name in STRATEGIES:
        loaded_from_entry_point(queue, name)


def test_the_observer_loads_on_install_and_the_strategies_wait_to_be_enabled(installed_queue):
    queue = installed_queue()
    loaded_from_entry_point(queue, "prometheus", enabled_by="installed")
    infos = {info.name: info for info in describe_plugins(queue.plugin_manager)}
    for name in STRATEGIES:
        assert queue.plugin_manager.get_plugin(name) is None
        assert (infos[name].status, infos[name].strategy) == ("available", True)
        assert f"--plugin {name} / {ENABLED_PLUGINS_ENV}={name} / plugins=[{name!r}]" in infos[name].note
    assert infos["content_hash"].hooks == ("sqla_queue_idempotency_key",)
    assert infos["decorrelated_jitter"].hooks == ("sqla_queue_retry_delay",)


def test_the_sentry_reporter_wraps_handlers_so_it_waits_to_be_enabled_by_name(installed_queue):
    infos = {info.name: info for info in describe_plugins(installed_queue().plugin_manager)}
    assert (infos["sentry"].status, infos["sentry"].strategy) == ("available", True)
    assert "sqla_queue_handle_job" in infos["sentry"].hooks
    loaded_from_entry_point(installed_queue(plugins=["sentry"]), "sentry")


def test_without_entry_points_no_plugin_distribution_is_loaded(engine):
    infos = describe_plugins(sq.Queue(engine, load_entrypoints=False).plugin_manager)
    assert {info.name for info in infos if info.status == "enabled"}.isdisjoint(DISTRIBUTIONS)
    listed = {info.name: info for info in infos if info.name in DISTRIBUTIONS}
    assert {info.status for info in listed.values()} == {"available"}
    assert "not loaded" in listed["prometheus"].note


def test_a_name_in_plugins_is_loaded_even_with_entry_points_off(engine, monkeypatch):
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, "1")
    queue = sq.Queue(engine, plugins=["content_hash"], load_entrypoints=False)
    loaded_from_entry_point(queue, "content_hash")
    assert queue.plugin_manager.get_plugin("prometheus") is None


# -- decorrelated jitter ------------------------------------------------------------------


def make_due(engine, job_ids) -> None:
    with engine.begin() as conn:
        conn.execute(text("UPDATE sqla_queue_jobs SET run_at = now() WHERE id = ANY(:ids)"), {"ids": job_ids})


def test_retries_follow_the_decorrelated_jitter_schedule(installed_queue, engine, db_now, drain):
    queue = installed_queue(plugins=["decorrelated_jitter"])
    jitter = loaded_from_entry_point(queue, "decorrelated_jitter")

    @queue.task(queue="jitter", max_attempts=5)
    def call_partner(payload, ctx):
        raise ConnectionError("partner down")

    ids = [queue.enqueue(call_partner, {"n": n}) for n in range(3)]
    for attempt in (1, 2):
        before = db_now()
        summary = drain(queue, "jitter")
        after = db_now()
        assert (summary.claimed, summary.retried) == (3, 3)
        for job_id in ids:
            job, expected = queue.get_job(job_id), jitter.delay(job_id, attempt)
            assert (job.status, job.attempts) == (sq.JobStatus.PENDING, attempt)
            assert before + expected <= job.run_at <= after + expected
            assert expected >= timedelta(seconds=1)  # the decorrelated jitter's base, not the built-in's
        make_due(engine, ids)


def test_blocking_the_jitter_entry_point_brings_the_builtin_backoff_back(installed_queue, db_now, monkeypatch):
    monkeypatch.setenv(ENABLED_PLUGINS_ENV, "decorrelated_jitter")
    queue = installed_queue(blocked_plugins=["decorrelated_jitter"])  # blocking beats enabling
    assert queue.plugin_manager.get_plugin("decorrelated_jitter") is None
    queue.task(name="call_partner", queue="jitter")(lambda payload, ctx: 1 / 0)
    queue.enqueue("call_partner", {})
    (job,) = queue.claim("jitter", worker_id="w")
    before = db_now()
    outcome = queue.handle_failure(job, ZeroDivisionError())
    shortest, longest = backoff.delay_range(1)  # 7.5 s to 15 s
    assert before + shortest <= outcome.run_at <= db_now() + longest


# -- content hash -------------------------------------------------------------------------


def expected_content_key(task: str, payload: dict) -> str:
    """Computed here from the documented definition, not by the plugin."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(f"{task}\0{canonical}".encode()).hexdigest()


def test_a_duplicate_enqueue_is_collapsed_by_the_content_key(installed_queue, count_jobs, drain):
    queue = installed_queue(plugins=["content_hash"])
    loaded_from_entry_point(queue, "content_hash")
    keys_seen = []

    @queue.task(queue="receipts")
    def send_receipt(payload, ctx):
        keys_seen.append(ctx.idempotency_key)

    receipt = {"order": 7, "to": "zoë@example.com", "lines": [{"sku": "a", "qty": 1}]}
    first = queue.enqueue(send_receipt, receipt)
    reordered = {"lines": [{"qty": 1, "sku": "a"}], "to": "zoë@example.com", "order": 7}
    assert queue.enqueue(send_receipt, reordered) == first
    other, same = queue.enqueue_many([
        {"task": "send_receipt", "payload": {**receipt, "order": 8}},
        {"task": "send_receipt", "payload": receipt},
    ])
    assert same == first and other != first
    assert count_jobs() == 2
    assert queue.get_job(first).idempotency_key == expected_content_key("send_receipt", receipt)

    drain(queue, "receipts")
    assert sorted(keys_seen) == sorted([expected_content_key("send_receipt", receipt),
                                        expected_content_key("send_receipt", {**receipt, "order": 8})])
    assert queue.enqueue(send_receipt, receipt) not in (first, other)  # the key is free once done
    assert queue.enqueue(send_receipt, receipt, idempotency_key="manual") != first


def test_with_the_content_hash_plugin_blocked_duplicates_are_separate_jobs(installed_queue, count_jobs, monkeypatch):
    monkeypatch.setenv(BLOCKED_PLUGINS_ENV, "content_hash")
    queue = installed_queue(plugins=["content_hash"])
    queue.task(name="send_receipt", queue="receipts")(lambda payload, ctx: None)
    assert queue.enqueue("send_receipt", {"order": 7}) != queue.enqueue("send_receipt", {"order": 7})
    assert count_jobs() == 2


# -- prometheus ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert reply.status == 200
        body = reply.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def test_metrics_of_a_real_run_are_scraped_over_http(installed_queue, monkeypatch, drain):
    port = free_port()
    monkeypatch.setenv("SQLA_QUEUE_PROMETHEUS_PORT", str(port))
    monkeypatch.setenv("SQLA_QUEUE_PROMETHEUS_ADDR", "127.0.0.1")
    queue = installed_queue(plugins=["content_hash"])  # prometheus' sqla_queue_configure starts the endpoint
    loaded_from_entry_point(queue, "prometheus", enabled_by="installed")
    name = f"metrics-{uuid.uuid4().hex[:8]}"
    queue.task(name="ok", queue=name)(lambda payload, ctx: None)

    @queue.task(name="flaky", queue=name, max_attempts=2, retry_delay=timedelta(0))
    def flaky(payload, ctx):
        raise TimeoutError("partner timed out")

    for n in (1, 2, 1):  # the third is collapsed onto the first by the content key
        queue.enqueue("ok", {"n": n})
    queue.enqueue("flaky", {})
    queue.enqueue("ok", {"n": "tomorrow"}, delay=timedelta(days=1))
    summary = drain(queue, name)
    assert (summary.completed, summary.retried, summary.failed) == (2, 1, 1)

    metrics = scrape(port)
    ok, flaky_labels = (("queue", name), ("task", "ok")), (("queue", name), ("task", "flaky"))
    assert metrics[("sqla_queue_jobs_enqueued_total", ok)] == 3
    assert metrics[("sqla_queue_jobs_deduplicated_total", ok)] == 1
    assert metrics[("sqla_queue_jobs_claimed_total", ok)] == 2
    assert metrics[("sqla_queue_jobs_claimed_total", flaky_labels)] == 2
    assert metrics[("sqla_queue_jobs_completed_total", ok)] == 2
    assert metrics[("sqla_queue_job_duration_seconds_count", ok)] == 2
    assert metrics[("sqla_queue_jobs_retried_total", flaky_labels)] == 1
    assert metrics[("sqla_queue_jobs_failed_total", flaky_labels)] == 1
    assert metrics[("sqla_queue_jobs", (("queue", name), ("status", "pending")))] == 1
    assert metrics[("sqla_queue_jobs", (("queue", name), ("status", "running")))] == 0
    assert metrics[("sqla_queue_scheduled_jobs", (("queue", name),))] == 1
    assert metrics[("sqla_queue_eligible_jobs", (("queue", name),))] == 0


# -- the command line ---------------------------------------------------------------------


def run_cli(*args: str, cwd=None) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in (BLOCKED_PLUGINS_ENV, DISABLE_AUTOLOAD_ENV, ENABLED_PLUGINS_ENV)}
    done = subprocess.run([sys.executable, "-m", "sqla_queue.cli", *args, "plugins", "--json"],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_sqla_queue_plugins_lists_the_installed_entry_points_in_a_fresh_process():
    listed = {entry["name"]: entry for entry in run_cli()}
    for name, (distribution, _) in DISTRIBUTIONS.items():
        assert listed[name]["source"] == "entry point"
        assert listed[name]["distribution"].startswith(f"{distribution} ")
    assert listed["sqla_queue.backoff"] == {
        "name": "sqla_queue.backoff", "source": "builtin", "distribution": None,
        "hooks": ["sqla_queue_retry_delay"], "blocked": False, "status": "enabled",
        "enabled_by": "builtin", "strategy": True, "note": None,
    }
    assert "sqla_queue_job_completed" in listed["prometheus"]["hooks"]
    assert (listed["prometheus"]["status"], listed["prometheus"]["enabled_by"]) == ("enabled", "installed")
    assert listed["content_hash"]["status"] == "available"
    assert listed["content_hash"]["hooks"] == ["sqla_queue_idempotency_key"]
    assert "enable with --plugin content_hash" in listed["content_hash"]["note"]


def test_sqla_queue_plugin_option_enables_by_name_in_the_listing():
    listed = {entry["name"]: entry for entry in run_cli("--plugin", "content_hash", "--plugin", "decorrelated_jitter")}
    for name in STRATEGIES:
        assert (listed[name]["status"], listed[name]["enabled_by"]) == ("enabled", ENABLED_PLUGINS_ENV)


def test_the_plugins_table_says_why_a_strategy_plugin_is_not_enabled():
    env = {k: v for k, v in os.environ.items() if k not in (BLOCKED_PLUGINS_ENV, DISABLE_AUTOLOAD_ENV, ENABLED_PLUGINS_ENV)}
    done = subprocess.run([sys.executable, "-m", "sqla_queue.cli", "plugins"], capture_output=True, text=True,
                          env={**env, "COLUMNS": "250"}, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = {line.split("│")[1].strip(): line for line in done.stdout.splitlines() if line.count("│") > 2}
    assert "enabled (installed)" in rows["prometheus"]
    assert "available" in rows["content_hash"] and "idempotency_key" in rows["content_hash"]
    assert ("content_hash is not enabled: implements sqla_queue_idempotency_key: enable with --plugin "
            "content_hash / SQLA_QUEUE_PLUGINS=content_hash / plugins=['content_hash']") in done.stdout.splitlines()


def test_sqla_queue_plugins_with_an_app_shows_its_explicit_plugins_and_blocks(tmp_path, database_url):
    (tmp_path / "plugin_app.py").write_text(textwrap.dedent(f"""
        import sqla_queue as sq

        class AuditTrail:
            @sq.hookimpl
            def sqla_queue_job_failed(self, event):
                pass

        queue = sq.Queue({database_url!r}, plugins=[AuditTrail(), "content_hash"], blocked_plugins=["prometheus"])
    """))
    listed = {entry["name"]: entry for entry in run_cli("--app", "plugin_app:queue", cwd=tmp_path)}
    assert listed["plugin_app.AuditTrail"]["source"] == "explicit"
    assert listed["plugin_app.AuditTrail"]["hooks"] == ["sqla_queue_job_failed"]
    assert listed["sqla_queue.backoff"]["source"] == "builtin"
    assert "sqla_queue.task_overrides" not in listed and "sqla_queue.idempotency" not in listed
    assert listed["prometheus"]["blocked"] is True and listed["prometheus"]["status"] == "blocked"
    assert (listed["content_hash"]["status"], listed["content_hash"]["enabled_by"]) == ("enabled", "plugins=")
    assert listed["decorrelated_jitter"]["status"] == "available"
