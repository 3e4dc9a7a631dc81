"""Every malformed argument raises the documented exception and writes nothing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

import sqla_queue as sq
from sqla_queue.errors import ConfigurationError, InvalidInputError, PayloadError, UnknownTaskError

NAIVE = datetime(2030, 1, 1, 12, 0)
AWARE = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)

BAD_NAMES = [
    pytest.param("", id="empty"),
    pytest.param("   ", id="whitespace-only"),
    pytest.param(" emails", id="leading-whitespace"),
    pytest.param("emails\t", id="trailing-whitespace"),
    pytest.param("q" * 129, id="129-chars"),
    pytest.param("em\x00ails", id="nul"),
    pytest.param("em\x07ails", id="bell"),
    pytest.param("em\nails", id="newline"),
    pytest.param("em\x1bails", id="escape"),
    pytest.param(5, id="not-a-string"),
]

BAD_PAYLOADS = [
    pytest.param({"when": object()}, id="not-json-serializable"),
    pytest.param({"blob": b"bytes"}, id="bytes"),
    pytest.param({"tags": {1, 2}}, id="set"),
    pytest.param({"note": "a\x00b"}, id="nul-in-value"),
    pytest.param({"nested": [{"deep": "\x00"}]}, id="nul-nested"),
    pytest.param({"a\x00b": 1}, id="nul-in-key"),
    pytest.param({"x": float("nan")}, id="nan"),
    pytest.param({"x": float("inf")}, id="infinity"),
    pytest.param({"x": [float("-inf")]}, id="minus-infinity"),
    pytest.param({"s": "\ud800"}, id="lone-surrogate"),
    pytest.param({("a", "b"): 1}, id="tuple-key"),
    pytest.param([1, 2], id="list"),
    pytest.param("text", id="str"),
    pytest.param(None, id="none"),
]

BAD_MAX_ATTEMPTS = [
    pytest.param(0, id="zero"),
    pytest.param(-1, id="negative"),
    pytest.param(True, id="bool"),
    pytest.param(1.5, id="float"),
    pytest.param("3", id="str"),
    pytest.param(1_000_001, id="too-large"),
]

BAD_SCHEDULES = [
    pytest.param({"run_at": NAIVE}, id="naive-run_at"),
    pytest.param({"run_at": "2030-01-01T12:00:00Z"}, id="run_at-str"),
    pytest.param({"run_at": AWARE, "delay": 5}, id="run_at-and-delay"),
    pytest.param({"delay": -1}, id="negative-delay"),
    pytest.param({"delay": timedelta(seconds=-1)}, id="negative-timedelta"),
    pytest.param({"delay": float("nan")}, id="nan-delay"),
    pytest.param({"delay": float("inf")}, id="infinite-delay"),
    pytest.param({"delay": True}, id="bool-delay"),
    pytest.param({"delay": "5"}, id="str-delay"),
]

BAD_KEYS = [
    pytest.param("", id="empty"),
    pytest.param(5, id="not-a-string"),
    pytest.param("k" * 513, id="513-chars"),
    pytest.param("k\x00", id="nul"),
    pytest.param("k\n1", id="newline"),
]


@pytest.fixture
def unchanged(queue, connection, table_rows):
    """Seed one job in the test's rolled-back transaction; after the test, the whole table as
    that transaction sees it (the seed and anything committed meanwhile) must be as before."""
    queue.enqueue("send_email", {"seed": True}, connection=connection)
    before = table_rows()
    yield
    assert table_rows() == before


@pytest.mark.parametrize("payload", BAD_PAYLOADS)
def test_bad_payload_raises_payload_error(queue, unchanged, payload):
    with pytest.raises(PayloadError, match="payload"):
        queue.enqueue("send_email", payload)


def test_payload_error_is_an_invalid_input_error():
    assert issubclass(PayloadError, InvalidInputError)
    assert issubclass(InvalidInputError, ValueError)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_queue_name_on_enqueue_raises_invalid_input(queue, unchanged, name):
    with pytest.raises(InvalidInputError, match="queue"):
        queue.enqueue("send_email", {}, queue=name)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_queue_name_on_claim_raises_invalid_input(queue, unchanged, name):
    with pytest.raises(InvalidInputError, match="queue"):
        queue.claim(name, worker_id="w")


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_worker_id_on_claim_raises_invalid_input(queue, unchanged, name):
    with pytest.raises(InvalidInputError, match="worker_id"):
        queue.claim(worker_id=name)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_task_name_at_registration_raises_invalid_input(queue, name):
    with pytest.raises(InvalidInputError, match="task name"):
        queue.task(name=name)(lambda payload, ctx: None)
    assert queue.task_names == ["resize", "send_email"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_default_queue_at_registration_raises_invalid_input(queue, name):
    with pytest.raises(InvalidInputError, match="queue"):
        queue.task(name="fine", queue=name)(lambda payload, ctx: None)


@pytest.mark.parametrize("name", [*BAD_NAMES, pytest.param("no_such_task", id="unregistered")])
def test_unknown_or_malformed_task_name_on_enqueue_raises_unknown_task(queue, unchanged, name):
    with pytest.raises(UnknownTaskError):
        queue.enqueue(name, {})


def test_unregistered_function_raises_unknown_task(queue, unchanged):
    def not_registered(payload, ctx):
        return None

    with pytest.raises(UnknownTaskError, match="not a registered task"):
        queue.enqueue(not_registered, {})


@pytest.mark.parametrize("value", BAD_MAX_ATTEMPTS)
def test_bad_max_attempts_raises_invalid_input(queue, unchanged, value):
    with pytest.raises(InvalidInputError, match="max_attempts"):
        queue.enqueue("send_email", {}, max_attempts=value)


@pytest.mark.parametrize("value", BAD_MAX_ATTEMPTS)
def test_bad_max_attempts_at_registration_raises_invalid_input(queue, value):
    with pytest.raises(InvalidInputError, match="max_attempts"):
        queue.task(name="fine", max_attempts=value)(lambda payload, ctx: None)


@pytest.mark.parametrize("options", BAD_SCHEDULES)
def test_bad_schedule_on_enqueue_raises_invalid_input(queue, unchanged, options):
    with pytest.raises(InvalidInputError, match="run_at|delay"):
        queue.enqueue("send_email", {}, **options)


@pytest.mark.parametrize("options", BAD_SCHEDULES)
def test_bad_schedule_on_retry_raises_invalid_input_and_keeps_the_claim(committed_queue, job_row, options):
    job_id = committed_queue.enqueue("send_email", {})
    [job] = committed_queue.claim(worker_id="w")
    before = job_row(job_id)

    with pytest.raises(InvalidInputError, match="run_at|delay"):
        committed_queue.retry(job.id, job.claim_token, error="x", **options)

    assert job_row(job_id) == before
    assert committed_queue.complete(job.id, job.claim_token) is True


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_idempotency_key_raises_invalid_input(queue, unchanged, key):
    with pytest.raises(InvalidInputError, match="idempotency_key"):
        queue.enqueue("send_email", {}, idempotency_key=key)


def test_session_and_connection_together_raise_invalid_input(queue, engine, unchanged):
    with Session(engine) as session, engine.connect() as conn:
        with pytest.raises(InvalidInputError, match="session or connection"):
            queue.enqueue("send_email", {}, session=session, connection=conn)


BAD_BATCH_ENTRIES = [
    pytest.param({"task": "send_email", "payload": {"x": float("nan")}}, PayloadError, id="payload"),
    pytest.param({"task": "send_email", "payload": {}, "queue": " q"}, InvalidInputError, id="queue"),
    pytest.param({"task": "send_email", "payload": {}, "max_attempts": 0}, InvalidInputError,
                 id="max_attempts"),
    pytest.param({"task": "send_email", "payload": {}, "run_at": NAIVE}, InvalidInputError,
                 id="naive-run_at"),
    pytest.param({"task": "send_email", "payload": {}, "idempotency_key": ""}, InvalidInputError,
                 id="key"),
    pytest.param({"task": "send_email", "payload": {}, "priority": 1.5}, InvalidInputError,
                 id="priority"),
    pytest.param({"task": "send_email", "payload": {}, "urgency": 1}, InvalidInputError,
                 id="unknown-option"),
    pytest.param({"task": "send_email"}, InvalidInputError, id="missing-payload"),
    pytest.param(["send_email", {}], InvalidInputError, id="not-a-mapping"),
    pytest.param({"task": "no_such_task", "payload": {}}, UnknownTaskError, id="unknown-task"),
]


@pytest.mark.parametrize(("bad", "error"), BAD_BATCH_ENTRIES)
def test_enqueue_many_with_one_bad_job_writes_none_and_names_its_index(queue, unchanged, bad, error):
    good = {"task": "send_email", "payload": {"ok": True}}

    with pytest.raises(error, match=r"jobs\[1\]"):
        queue.enqueue_many([good, bad, good])


BAD_OUTCOME_ARGS = [
    pytest.param("1", "token", id="job_id-str"),
    pytest.param(True, "token", id="job_id-bool"),
    pytest.param(1, "", id="token-empty"),
    pytest.param(1, None, id="token-none"),
]


@pytest.mark.parametrize(("job_id", "token"), BAD_OUTCOME_ARGS)
def test_bad_outcome_arguments_raise_invalid_input(queue, unchanged, job_id, token):
    with pytest.raises(InvalidInputError):
        queue.complete(job_id, token)
    with pytest.raises(InvalidInputError):
        queue.retry(job_id, token, error="x")
    with pytest.raises(InvalidInputError):
        queue.fail(job_id, token, error="x")


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "10"])
def test_bad_claim_limit_raises_invalid_input(queue, unchanged, limit):
    with pytest.raises(InvalidInputError, match="limit"):
        queue.claim(worker_id="w", limit=limit)


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"lease": 0}, id="zero-lease"),
        pytest.param({"lease": timedelta(seconds=-5)}, id="negative-lease"),
        pytest.param({"lease": "5m"}, id="str-lease"),
        pytest.param({"limit": 0}, id="zero-limit"),
    ],
)
def test_bad_recovery_options_raise_invalid_input(queue, unchanged, options):
    with pytest.raises(InvalidInputError, match="lease|limit"):
        queue.recover_expired(**options)


@pytest.mark.parametrize("job_id", ["1", 1.0, None])
def test_get_job_with_a_non_integer_id_raises_invalid_input(queue, job_id):
    with pytest.raises(InvalidInputError, match="job_id"):
        queue.get_job(job_id)


def test_get_job_of_a_missing_id_is_none(queue):
    assert queue.get_job(123_456) is None


@pytest.mark.parametrize(
    "engine_arg",
    [
        pytest.param(lambda: create_engine("sqlite://"), id="sqlite-engine"),
        pytest.param(lambda: "mysql://user@localhost/db", id="mysql-url"),
        pytest.param(lambda: "not a url", id="garbage-url"),
        pytest.param(lambda: 42, id="not-an-engine"),
    ],
)
def test_non_postgresql_engine_raises_configuration_error(engine_arg):
    with pytest.raises(ConfigurationError):
        sq.Queue(engine_arg(), load_entrypoints=False)


@pytest.mark.parametrize("model", [object, dict, sq.JobMixin])
def test_model_not_built_on_job_mixin_raises_configuration_error(engine, model):
    with pytest.raises(ConfigurationError, match="JobMixin"):
        sq.Queue(engine, model=model, load_entrypoints=False)


def test_plugin_with_a_misspelt_hook_raises_configuration_error(engine):
    class Misspelt:
        @sq.hookimpl
        def sqla_queue_job_complete(self, event):  # no such hook
            return None

    with pytest.raises(ConfigurationError, match="sqla_queue_job_complete"):
        sq.Queue(engine, plugins=[Misspelt()], load_entrypoints=False)
