"""Input checks that run before anything is sent to the database."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from sqla_queue import _validate
from sqla_queue.errors import ConfigurationError, InvalidInputError, PayloadError


@pytest.mark.parametrize("value", ["default", "emails-high", "q" * 128, "tenant:42/images", "émails"])
def test_good_names_pass_unchanged(value):
    assert _validate.name(value, "queue") == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "empty or blank"),
        ("   ", "empty or blank"),
        (" q", "leading or trailing whitespace"),
        ("q\n", "leading or trailing whitespace"),
        ("q" * 129, "129 characters long; the limit is 128"),
        ("a\x00b", "control or non-printable"),
        ("a\u200bb", "control or non-printable"),
        (None, "must be a string, got NoneType"),
    ],
)
def test_bad_names_say_what_is_wrong(value, message):
    with pytest.raises(InvalidInputError, match="^queue") as raised:
        _validate.name(value, "queue")
    assert message in str(raised.value)


def test_name_error_does_not_echo_an_overlong_value():
    with pytest.raises(InvalidInputError) as raised:
        _validate.name(" " + "x" * 1000, "queue")
    assert len(str(raised.value)) < 120


@pytest.mark.parametrize("value", [None, "k", "order:42", "k" * 512])
def test_good_idempotency_keys(value):
    assert _validate.idempotency_key(value) == value


@pytest.mark.parametrize("value", ["", "k" * 513, "a\tb", 42, b"key"])
def test_bad_idempotency_keys(value):
    with pytest.raises(InvalidInputError, match="idempotency_key"):
        _validate.idempotency_key(value)


@pytest.mark.parametrize("value", [1, 5, 1_000_000])
def test_good_max_attempts(value):
    assert _validate.max_attempts(value) == value


@pytest.mark.parametrize("value", [0, -3, 1_000_001, True, False, 2.0, "2", None])
def test_bad_max_attempts(value):
    with pytest.raises(InvalidInputError, match="max_attempts"):
        _validate.max_attempts(value)


def test_schedule_defaults_to_now_on_the_database_clock():
    assert _validate.schedule(None, None) == (None, timedelta(0))


def test_schedule_accepts_seconds_or_timedelta():
    assert _validate.schedule(None, 90) == (None, timedelta(seconds=90))
    assert _validate.schedule(None, 1.5) == (None, timedelta(seconds=1.5))
    assert _validate.schedule(None, timedelta(minutes=2)) == (None, timedelta(minutes=2))


def test_schedule_accepts_an_aware_run_at():
    when = datetime(2030, 1, 1, tzinfo=timezone(timedelta(hours=2)))
    assert _validate.schedule(when, None) == (when, timedelta(0))


@pytest.mark.parametrize(
    ("run_at", "delay", "message"),
    [
        (datetime(2030, 1, 1), None, "naive datetime"),
        ("2030-01-01", None, "must be a datetime"),
        (datetime(2030, 1, 1, tzinfo=timezone.utc), 5, "not both"),
        (None, -1, "^delay must be non-negative, got -1 second$"),
        (None, timedelta(days=-1), "^delay must be non-negative, got -86400 seconds$"),
        (None, timedelta(microseconds=-1), "^delay must be non-negative, got -1e-06 seconds$"),
        (None, float("nan"), "finite"),
        (None, float("inf"), "finite"),
        (None, True, "got bool"),
        (None, "5", "timedelta or seconds"),
    ],
)
def test_bad_schedules(run_at, delay, message):
    with pytest.raises(InvalidInputError, match=message):
        _validate.schedule(run_at, delay)


def test_positive_duration_rejects_zero():
    with pytest.raises(InvalidInputError, match="lease must be positive"):
        _validate.duration(0, "lease", positive=True)


def test_payload_becomes_compact_json_that_round_trips():
    payload = {"to": "a@example.com", "n": [1, 2.5, None, True], "nested": {"é": "ü"}}
    text = _validate.payload_json(payload)
    assert json.loads(text) == payload
    assert ", " not in text and ": " not in text


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([1], "must be a dict"),
        (None, "must be a dict"),
        ({"x": float("nan")}, "NaN or Infinity"),
        ({"x": float("-inf")}, "NaN or Infinity"),
        ({"x": object()}, "not JSON-serializable"),
        ({"x": "a\x00"}, "NUL"),
        ({"a\x00": 1}, "NUL"),
        ({"x": ["ok", {"y": "\x00"}]}, "NUL"),
        ({"x": "\udc80"}, "surrogate"),
        ({"\ud800": 1}, "surrogate"),
    ],
)
def test_bad_payloads(payload, message):
    with pytest.raises(PayloadError, match=message):
        _validate.payload_json(payload)


def test_deeply_nested_payload_is_a_payload_error_not_a_crash():
    payload: dict = {}
    inner = payload
    for _ in range(1_000):
        inner["x"] = {}
        inner = inner["x"]
    with pytest.raises(PayloadError, match="nested too deeply"):
        _validate.payload_json(payload)


def test_cyclic_payload_is_a_payload_error():
    payload: dict = {}
    payload["self"] = payload
    with pytest.raises(PayloadError):
        _validate.payload_json(payload)


@pytest.mark.parametrize("value", [0, -1, True, 1.0, "3"])
def test_positive_int_rejects(value):
    with pytest.raises(InvalidInputError, match="limit must be a positive integer"):
        _validate.positive_int(value, "limit")


def test_config_positive_int_raises_configuration_error():
    with pytest.raises(ConfigurationError, match="concurrency"):
        _validate.config_positive_int(0, "concurrency")


@pytest.mark.parametrize(
    ("value", "message"),
    [(True, "job_id must be an integer, got bool"), ("7", "job_id must be an integer, got str"),
     (1.0, "job_id must be an integer, got float"), (0, "job_id must be a positive integer, got 0"),
     (-2, "job_id must be a positive integer, got -2"),
     (2**63, f"job_id {2**63} is beyond the largest job id, {2**63 - 1}")],
)
def test_job_id_is_one_rule_for_every_call(value, message):
    with pytest.raises(InvalidInputError, match=f"^{message}$"):
        _validate.job_id(value)


def test_job_id_accepts_positive_integers_and_names_the_argument():
    assert _validate.job_id(1) == 1
    with pytest.raises(InvalidInputError, match="^before_id must be a positive integer"):
        _validate.job_id(0, "before_id")


@pytest.mark.parametrize("value", [-1, True, 0.5, "1"])
def test_non_negative_int_rejects(value):
    with pytest.raises(InvalidInputError, match="limit must be a non-negative integer"):
        _validate.non_negative_int(value, "limit")


def test_non_negative_int_accepts_zero():
    assert _validate.non_negative_int(0, "limit") == 0


@pytest.mark.parametrize("value", [0, -0.5, float("nan"), float("inf"), True, "1"])
def test_positive_number_rejects(value):
    with pytest.raises(ConfigurationError, match="interval must be a positive number of seconds"):
        _validate.positive_seconds(value, "interval", error=ConfigurationError)


def test_claim_token_must_be_a_non_empty_string():
    assert _validate.claim_token("abc") == "abc"
    for bad in ("", None, 3):
        with pytest.raises(InvalidInputError, match="claim_token"):
            _validate.claim_token(bad)
