"""The Sentry plugin, reached through its entry point, on real jobs run by a real worker, with a
default ``sentry_sdk.init()`` whose transport collects envelopes (conftest.py)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest
import sentry_sdk
from sentry_sdk.integrations.logging import LoggingIntegration

import sqla_queue as sq
from sqla_queue.testing import check_lifecycle_plugin, check_run_middleware, drain
from sqla_queue_sentry import FILTERED, RETRIES_ENV, SentryReporter

SECRET = "4111-1111-1111-1111"
EMAIL = "alice@example.com"
FAST = {"poll_interval": 0.05, "lease": timedelta(seconds=10)}


def sentry_queue(engine, **options) -> sq.Queue:
    """A Queue with the plugin enabled by its entry-point name, as an application does."""
    return sq.Queue(engine, plugins=["sentry"], **options)


def declining_charge(payload: dict, ctx: sq.JobContext) -> None:
    card = payload["card"]  # a local variable holding a payload value
    raise RuntimeError(f"card {card} declined for {payload['email']}")


def register_charge(queue: sq.Queue, name: str, max_attempts: int = 2):
    return queue.task(name="charge", queue=name, max_attempts=max_attempts, retry_delay=timedelta(0))(declining_charge)


def test_enabled_by_name_through_the_entry_point_and_not_on_install(engine):
    assert sq.Queue(engine).plugin_manager.get_plugin("sentry") is None
    plugin = sentry_queue(engine).plugin_manager.get_plugin("sentry")
    assert type(plugin) is SentryReporter
    assert type(plugin).__module__.startswith("sqla_queue_sentry.")


def test_its_run_middleware_leaves_every_outcome_as_it_was(engine, sentry):
    report = check_run_middleware(SentryReporter(), engine)
    assert sum(len(outcomes) for outcomes in report.outcomes.values()) == 10  # every attempt ran once
    assert report.loads_on_install is False


def test_passes_the_lifecycle_conformance_check(engine, sentry):
    report = check_lifecycle_plugin(SentryReporter(), engine)
    assert set(report.hooks) == {"sqla_queue_job_retried", "sqla_queue_job_failed", "sqla_queue_job_recovered"}
    assert report.loads_on_install is False
    # the run's terminal failure (recorded outside any worker) was reported, from a scope of its own
    (event,) = [e for e in sentry.events if e["tags"].get("sqla_queue.task") == "conformance_lifecycle"]
    assert event["level"] == "error"
    assert event["exception"]["values"][-1]["type"] == "NonRetryableError"


def test_a_job_that_fails_for_good_is_one_error_event_with_the_jobs_tags(engine, sentry, queue_name, caplog):
    queue = sentry_queue(engine)
    charge = register_charge(queue, queue_name)
    job_id = charge.enqueue({"card": SECRET, "email": EMAIL}, idempotency_key="order-17")

    with caplog.at_level(logging.INFO, logger="sqla_queue"):
        summary = queue.worker(queues=[queue_name], concurrency=2, **FAST).run(until_empty=True)

    assert (summary.retried, summary.failed) == (1, 1)
    # the worker did log the failure at ERROR, which Sentry's logging integration turns into an
    # event of its own: the plugin's report is the only one that got through
    assert [r.outcome for r in caplog.records if r.name == "sqla_queue" and r.levelno == logging.ERROR] == ["failed"]
    (event,) = sentry.events
    assert event["level"] == "error"
    assert event["tags"] == {
        "sqla_queue.queue": queue_name, "sqla_queue.task": "charge", "sqla_queue.attempt": "2",
        "sqla_queue.job_id": str(job_id), "sqla_queue.idempotency_key": "order-17", "sqla_queue.outcome": "failed",
    }
    assert event["fingerprint"] == ["sqla_queue", "charge", "RuntimeError"]
    (exception,) = event["exception"]["values"]
    assert exception["type"] == "RuntimeError"
    assert exception["mechanism"] == {"type": "sqla_queue", "handled": False}
    assert exception["value"] == f"card {FILTERED} declined for {FILTERED}"
    frames = exception["stacktrace"]["frames"]
    assert frames[0]["function"] == "declining_charge"  # the handler's frame, not the library's
    assert not any("vars" in frame for frame in frames)
    assert event["contexts"]["sqla_queue"]["max_attempts"] == 2
    assert set(event.get("extra", {})) <= {"sys.argv"}  # sentry-sdk's own; never the payload
    text = sentry.everything()
    assert SECRET not in text and EMAIL not in text


def test_without_the_plugin_the_log_line_is_the_event(engine, sentry, queue_name):
    """The control: what the default logging integration sends on its own, which the plugin's
    report replaces."""
    queue = sq.Queue(engine)
    register_charge(queue, queue_name, max_attempts=1).enqueue({"card": SECRET, "email": EMAIL})
    queue.worker(queues=[queue_name], concurrency=1, **FAST).run(until_empty=True)
    (event,) = sentry.events
    assert (event["logger"], event["level"]) == ("sqla_queue", "error")
    assert "failed for good" in event["logentry"]["message"]


@pytest.mark.parametrize(("mode", "levels"), [("breadcrumb", ["error"]), ("warning", ["warning", "error"])])
def test_with_warnings_logged_as_events_a_reported_retry_is_still_one_event(engine, sentry, queue_name, mode, levels):
    """A logging integration that sends ``WARNING`` records too would also send the worker's
    retry line: the plugin's report (or its breadcrumb) stands for it."""
    sentry_sdk.init(dsn=sentry_sdk.get_client().dsn, transport=sentry, integrations=[LoggingIntegration(event_level=logging.WARNING)])
    queue = sq.Queue(engine, plugins=[SentryReporter(retries=mode)])
    register_charge(queue, queue_name).enqueue({"card": SECRET, "email": EMAIL})
    queue.worker(queues=[queue_name], concurrency=1, **FAST).run(until_empty=True)
    assert [(e["level"], "logger" in e) for e in sentry.events] == [(level, False) for level in levels]


def test_retries_are_breadcrumbs_by_default(engine, sentry, queue_name):
    queue = sentry_queue(engine)
    register_charge(queue, queue_name, max_attempts=3).enqueue({"card": SECRET, "email": EMAIL})

    ran = drain(queue, queues=[queue_name])  # every attempt in this thread, one scope after another

    assert [r.outcome for r in ran] == ["retried", "retried", "failed"]
    (event,) = sentry.events
    crumbs = [c for c in event["breadcrumbs"]["values"] if c.get("category") == "sqla_queue.retry"]
    assert [(c["level"], c["data"]["attempt"], c["data"]["error_type"]) for c in crumbs] == [
        ("warning", 1, "RuntimeError"), ("warning", 2, "RuntimeError")]
    assert SECRET not in sentry.everything()


@pytest.mark.parametrize(("mode", "levels"), [("warning", ["warning", "error"]), ("error", ["error", "error"]),
                                              ("ignore", ["error"])])
def test_retry_modes(engine, sentry, queue_name, mode, levels):
    queue = sq.Queue(engine, plugins=[SentryReporter(retries=mode)])
    register_charge(queue, queue_name).enqueue({"card": SECRET, "email": EMAIL})
    queue.worker(queues=[queue_name], concurrency=1, **FAST).run(until_empty=True)
    assert [e["level"] for e in sentry.events] == levels
    assert [e["tags"]["sqla_queue.outcome"] for e in sentry.events] == ["retried", "failed"][-len(levels):]
    assert {tuple(e["fingerprint"]) for e in sentry.events} == {("sqla_queue", "charge", "RuntimeError")}


def test_the_retry_mode_comes_from_the_environment_and_a_bad_one_stops_the_queue(engine, sentry, queue_name,
                                                                                  monkeypatch):
    monkeypatch.setenv(RETRIES_ENV, "warning")
    queue = sentry_queue(engine)
    register_charge(queue, queue_name).enqueue({"card": SECRET, "email": EMAIL})
    queue.worker(queues=[queue_name], concurrency=1, **FAST).run(until_empty=True)
    assert [e["level"] for e in sentry.events] == ["warning", "error"]

    monkeypatch.setenv(RETRIES_ENV, "loud")
    with pytest.raises(sq.PluginError, match=rf"{RETRIES_ENV} is 'loud'.*breadcrumb, warning, error, ignore"):
        sentry_queue(engine)
    with pytest.raises(sq.ConfigurationError, match=r"retries= is 'warn'"):
        SentryReporter(retries="warn")


def test_two_reporters_on_one_queue_are_refused(engine):
    with pytest.raises(sq.PluginError, match="2 Sentry reporters"):
        sq.Queue(engine, plugins=["sentry", SentryReporter()])


def test_failures_group_by_task_and_exception_type_not_by_job(engine, sentry, queue_name):
    queue = sentry_queue(engine)
    register_charge(queue, queue_name, max_attempts=1)

    @queue.task(name="refund", queue=queue_name, max_attempts=1)
    def refund(payload, ctx):
        raise {"value": ValueError, "key": KeyError}[payload["kind"]]("nope")

    queue.enqueue_many([{"task": "charge", "payload": {"card": SECRET, "email": EMAIL, "n": n}} for n in range(3)]
                       + [{"task": "refund", "payload": {"kind": kind}} for kind in ("value", "key", "value")])
    queue.worker(queues=[queue_name], concurrency=3, **FAST).run(until_empty=True)

    fingerprints = sorted(tuple(e["fingerprint"]) for e in sentry.events)
    assert fingerprints == [("sqla_queue", "charge", "RuntimeError")] * 3 + [
        ("sqla_queue", "refund", "KeyError"), ("sqla_queue", "refund", "ValueError"), ("sqla_queue", "refund", "ValueError")]
    assert len({e["tags"]["sqla_queue.job_id"] for e in sentry.events}) == 6


def test_another_jobs_failure_line_in_the_breadcrumbs_quotes_none_of_its_payload(engine, sentry, queue_name):
    """Job A's retry is logged on the worker's thread (a breadcrumb there); job B then fails for
    good on that thread: B's event carries A's line, without A's error text."""
    queue = sentry_queue(engine)
    queue.task(name="a", queue=queue_name, max_attempts=2, retry_delay=timedelta(hours=1))(declining_charge)
    queue.task(name="b", queue=queue_name, max_attempts=1)(declining_charge)
    first = queue.enqueue("a", {"card": SECRET, "email": EMAIL})
    queue.enqueue("b", {"card": "5500-0000-0000-0004", "email": "bob@example.com"})

    assert [r.outcome for r in drain(queue, queues=[queue_name])] == ["retried", "failed"]

    (event,) = sentry.events
    assert event["tags"]["sqla_queue.task"] == "b"
    (line,) = [c for c in event["breadcrumbs"]["values"] if c.get("category") == "sqla_queue"
               and c["data"].get("outcome") == "retried"]
    assert line["message"] == f"job {first} (a on {queue_name}) retried on attempt 1"
    assert "error" not in line["data"] and "traceback" not in line["data"]
    text = sentry.everything()
    assert SECRET not in text and EMAIL not in text and "5500-0000-0000-0004" not in text


def test_the_handlers_own_events_carry_the_job_and_are_scrubbed(engine, sentry, queue_name):
    queue = sentry_queue(engine)

    @queue.task(name="notify", queue=queue_name)
    def notify(payload, ctx):
        logging.getLogger("myapp").warning("sending to %s", payload["email"])  # a breadcrumb
        sentry_sdk.capture_message("partner slow")

    job_id = queue.enqueue("notify", {"email": EMAIL})
    queue.worker(queues=[queue_name], concurrency=1, **FAST).run(until_empty=True)

    (event,) = sentry.events
    assert event["message"] == "partner slow"
    assert event["tags"]["sqla_queue.job_id"] == str(job_id)
    assert event["tags"]["sqla_queue.idempotency_key"]  # derived from the job id when none was given
    crumb = next(c for c in event["breadcrumbs"]["values"] if c.get("category") == "myapp")
    assert crumb["message"] == f"sending to {FILTERED}"


def test_a_job_does_not_see_the_previous_jobs_scope(engine, sentry, queue_name):
    queue = sentry_queue(engine)

    @queue.task(name="step", queue=queue_name, max_attempts=1)
    def step(payload, ctx):
        sentry_sdk.set_tag("step", payload["n"])
        sentry_sdk.add_breadcrumb(category="step", message=f"step {payload['n']}")
        if payload["n"] == 2:
            raise RuntimeError("second step broke")

    queue.enqueue("step", {"n": 1})
    queue.enqueue("step", {"n": 2})
    drain(queue, queues=[queue_name])  # both in this thread

    (event,) = sentry.events
    assert event["tags"]["step"] == 2
    assert [c["message"] for c in event["breadcrumbs"]["values"] if c.get("category") == "step"] == ["step 2"]


def test_scrubbing_can_be_turned_off(engine, sentry, queue_name):
    queue = sq.Queue(engine, plugins=[SentryReporter(scrub_payload=False)])
    register_charge(queue, queue_name, max_attempts=1).enqueue({"card": SECRET, "email": EMAIL})
    queue.worker(queues=[queue_name], concurrency=1, **FAST).run(until_empty=True)
    (event,) = sentry.events
    (exception,) = event["exception"]["values"]
    assert SECRET in exception["value"]
    assert SECRET in str(exception["stacktrace"]["frames"][0]["vars"]["card"])


def test_async_handlers_in_the_asyncio_worker(engine, sentry, queue_name):
    queue = sentry_queue(engine)

    @queue.task(name="charge_async", queue=queue_name, max_attempts=2, retry_delay=timedelta(0))
    async def charge_async(payload, ctx):
        await asyncio.sleep(0)
        sentry_sdk.add_breadcrumb(category="charge", message=f"attempt {ctx.attempt}")
        raise ConnectionError(f"gateway refused {payload['card']}")

    job_id = charge_async.enqueue({"card": SECRET}, idempotency_key="order-18")
    summary = asyncio.run(queue.worker(queues=[queue_name], concurrency=2, **FAST).run_async(until_empty=True))

    assert summary.failed == 1
    (event,) = sentry.events
    assert (event["level"], event["fingerprint"]) == ("error", ["sqla_queue", "charge_async", "ConnectionError"])
    assert event["tags"]["sqla_queue.job_id"] == str(job_id)
    assert event["tags"]["sqla_queue.idempotency_key"] == "order-18"
    assert event["tags"]["sqla_queue.attempt"] == "2"
    assert [c["message"] for c in event["breadcrumbs"]["values"] if c.get("category") == "charge"] == ["attempt 2"]
    assert event["exception"]["values"][-1]["value"] == f"gateway refused {FILTERED}"
    assert SECRET not in sentry.everything()


def test_a_last_attempt_lost_to_lease_expiry_is_an_error_event(engine, sentry, queue_name):
    queue = sentry_queue(engine)
    queue.task(name="hangs", queue=queue_name, max_attempts=1)(lambda payload, ctx: None)
    job_id = queue.enqueue("hangs", {"card": SECRET})
    queue.claim(queue_name, worker_id="gone", lease=timedelta(microseconds=1))
    queue.recover_expired()
    assert queue.get_job(job_id).status is sq.JobStatus.FAILED
    (event,) = sentry.events
    assert event["level"] == "error"
    assert event["fingerprint"] == ["sqla_queue", "hangs", "lease expired"]
    assert event["tags"]["sqla_queue.job_id"] == str(job_id)
    assert "lease of its last attempt expired" in event["message"]


def test_nothing_is_done_without_a_sentry_client(engine, queue_name):
    queue = sentry_queue(engine)
    register_charge(queue, queue_name, max_attempts=1).enqueue({"card": SECRET, "email": EMAIL})
    summary = queue.worker(queues=[queue_name], concurrency=1, **FAST).run(until_empty=True)
    assert summary.failed == 1
    assert not sentry_sdk.get_client().is_active()
