"""Input checks run before anything is sent to the database.

Each raises an `InvalidInputError` (or `PayloadError`) naming the argument and what is wrong,
so a bad call writes nothing. The rules mirror what PostgreSQL would reject later, less
helpfully, or silently get wrong (a naive datetime is read in the session's time zone).
"""

from __future__ import annotations

import difflib
import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any
from uuid import UUID

from .errors import ConfigurationError, InvalidInputError, PayloadError, ResultError, SqlaQueueError

MAX_NAME_LENGTH = 128
MAX_KEY_LENGTH = 512
MAX_ATTEMPTS_LIMIT = 1_000_000
MIN_PRIORITY, MAX_PRIORITY = -32768, 32767
"""A job's priority is a PostgreSQL ``smallint``; higher runs first, 0 is the default."""
DEFAULT_MAX_RESULT_BYTES = 65_536
"""64 KiB of encoded JSON: a result is a summary (ids, counts, a URL), read back by `Queue.wait`."""
DEFAULT_MAX_SNOOZES = 100
DEFAULT_MAX_PAYLOAD_BYTES = 1_048_576
"""1 MiB of encoded JSON: far above a payload of ids and parameters, far below what bloats the
job table (every claim returns the payload) or strains PostgreSQL (jsonb stops near 255 MB)."""


def name(value: Any, what: str) -> str:
    """Queue and task names: non-empty printable text without surrounding whitespace."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {type(value).__name__}")
    if not value or not value.strip():
        raise InvalidInputError(f"{what} must not be empty or blank")
    if value != value.strip():
        raise InvalidInputError(f"{what} {value.strip()[:40]!r} has leading or trailing whitespace")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidInputError(f"{what} is {len(value)} characters long; the limit is {MAX_NAME_LENGTH}")
    if not value.isprintable():
        raise InvalidInputError(f"{what} contains control or non-printable characters")
    return value


def queue_name(value: Any, what: str = "queue") -> str:
    """A queue name a job or a task is written under: `name`, without a comma, which
    ``sqla-queue worker --queues a,b`` splits on (such a queue could never be served)."""
    value = name(value, what)
    if "," in value:
        raise InvalidInputError(f"{what} {value[:40]!r} contains a comma; sqla-queue worker --queues "
                                "separates queue names with commas")
    return value


def group_key(value: Any) -> str:
    """A group key: a non-empty printable string of at most `MAX_KEY_LENGTH` characters."""
    return _key(value, "group_key")


def idempotency_key(value: Any) -> str | None:
    return None if value is None else _key(value, "idempotency_key")


def _key(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidInputError(f"{what} must not be empty")
    if len(value) > MAX_KEY_LENGTH:
        raise InvalidInputError(f"{what} is {len(value)} characters long; the limit is {MAX_KEY_LENGTH}")
    if not value.isprintable():
        raise InvalidInputError(f"{what} contains control or non-printable characters")
    return value


def max_attempts(value: Any, what: str = "max_attempts") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{what} must be an integer, got {type(value).__name__}")
    if not 1 <= value <= MAX_ATTEMPTS_LIMIT:
        raise InvalidInputError(f"{what} must be between 1 and {MAX_ATTEMPTS_LIMIT}, got {value}")
    return value


def priority(value: Any, what: str = "priority") -> int:
    """A PostgreSQL smallint: higher runs first."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{what} must be an integer, got {type(value).__name__}")
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise InvalidInputError(f"{what} must be between {MIN_PRIORITY} and {MAX_PRIORITY}, got {value}")
    return value


def snooze_delay(value: Any) -> timedelta:
    return duration(value, "snooze delay")


def result_json(value: Any, whose: str, limit: int) -> str:
    """A handler's return value as JSON text jsonb accepts unchanged, at most `limit` bytes.

    Refused rather than truncated: a cut JSON document is not a result. The errors become the
    attempt's error, so the message names `whose` value it is (``"task 'x'"``, ``"job 7"``) and
    what to do, never the value itself.
    """
    try:
        _reject_nul(value)
        text = json.dumps(value, allow_nan=False, separators=(",", ":"), default=json_value)
    except (PayloadError, ValueError, TypeError, RecursionError) as exc:
        raise ResultError(f"the return value of {whose} cannot be stored as JSON: {_why(exc)}") from None
    if len(text) > limit:
        raise ResultError(
            f"the return value of {whose} is {len(text):,} bytes of JSON; the limit is "
            f"{limit:,} (max_result_bytes): store large results elsewhere and return a reference"
        )
    return text


def _why(exc: BaseException) -> str:
    if isinstance(exc, PayloadError):
        return str(exc).replace("payload", "value", 1)
    if isinstance(exc, RecursionError):
        return "nested too deeply (or contains a cycle)"
    if isinstance(exc, ValueError):
        if _is_huge_int(exc):
            return f"an integer of more than {sys.get_int_max_str_digits():,} digits has no text form"
        return "NaN or Infinity has no JSON form"
    return str(exc)  # TypeError: "Object of type set is not JSON serializable"


def _is_huge_int(exc: ValueError) -> bool:
    """Python's cap on int-to-text conversion (CVE-2020-10735), not a float JSON cannot hold."""
    return "integer string conversion" in str(exc)


def aware_datetime(value: Any, what: str) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidInputError(f"{what} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInputError(
            f"{what} is a naive datetime; pass a timezone-aware one (e.g. datetime.now(UTC))"
        )
    return value


MAX_DURATION = timedelta(days=36_525)
"""100 years: the longest delay, lease, window or timeout accepted. Far beyond any real one, and
far inside what PostgreSQL's timestamps can reach from today (a due time 300,000 years out is
refused by the database only when the row is written, or on a retry, when no one is told)."""


def duration(value: Any, what: str, *, positive: bool = False) -> timedelta:
    """A timedelta, or a number of seconds, at most `MAX_DURATION`."""
    if isinstance(value, bool):
        raise InvalidInputError(f"{what} must be a timedelta or seconds, got bool")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise InvalidInputError(f"{what} must be finite, got {value!r}")
        if abs(value) > MAX_DURATION.total_seconds():  # before timedelta() overflows on it
            raise InvalidInputError(f"{what} of {value:g} seconds is over the limit of 100 years")
        value = timedelta(seconds=value)
    if not isinstance(value, timedelta):
        raise InvalidInputError(f"{what} must be a timedelta or seconds, got {type(value).__name__}")
    if value < timedelta(0) or (positive and value == timedelta(0)):
        raise InvalidInputError(f"{what} must be {'positive' if positive else 'non-negative'}, "
                                f"got {_in_seconds(value)}")
    if value > MAX_DURATION:
        raise InvalidInputError(f"{what} of {value.days:,} days is over the limit of 100 years")
    return value


def _in_seconds(value: timedelta) -> str:
    """``-1 second``, ``-1.5 seconds``: how a user typed it (``str()`` says ``-1 day, 23:59:59``)."""
    seconds = value.total_seconds()
    return f"{seconds:g} second{'' if abs(seconds) == 1 else 's'}"


def schedule(run_at: Any, delay: Any) -> tuple[datetime | None, timedelta]:
    """run_at XOR delay; neither means "now" on the database's clock."""
    if run_at is not None and delay is not None:
        raise InvalidInputError("pass run_at or delay, not both")
    if run_at is not None:
        return aware_datetime(run_at, "run_at"), timedelta(0)
    return None, duration(delay, "delay") if delay is not None else timedelta(0)


def payload_json(payload: Any) -> str:
    """The payload as JSON text that PostgreSQL's jsonb will accept unchanged.

    Encoding first and walking the payload only when the text says it might be needed gives the
    same answers as walking first (`_checked_payload_json`), at a fraction of the cost: the text
    is pure ASCII, so a NUL or a lone surrogate anywhere, keys included, shows up as a
    ``\\u0000`` or ``\\udXXX`` escape; a value nested more than `_MAX_DEPTH` deep needs more
    opening brackets than that. Anything the encoder refuses (including a cycle) goes the slow
    way, which reports it exactly as before.
    """
    if not isinstance(payload, dict):
        raise PayloadError(f"payload must be a dict (a JSON object), got {type(payload).__name__}")
    try:
        text = _encode(payload)
    except Exception:
        return _checked_payload_json(payload)
    if ("\\u0000" in text or "\\ud" in text or text.count("{") + text.count("[") > _MAX_DEPTH
            or _COERCED_KEY.search(text)):
        _reject_nul(payload)  # a false alarm (an escaped backslash, an emoji, a "1" key) just passes
    return text


def json_value(value: Any) -> Any:
    """The JSON form of the values applications pass that JSON has no type for (the encoder's
    ``default``): a datetime, date or time as ISO 8601 text (``datetime.isoformat()``, offset
    kept; read back with ``fromisoformat``), a Decimal as its exact text (``"12.50"``), a UUID as
    its hyphenated text, an Enum member as its value. Anything else stays refused."""
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, (Decimal, UUID)):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _unencodable_at(value: Any, path: str = "") -> str | None:
    """Where in `value` the first value `json_value` refuses sits (``['items'][2]['at']``)."""
    if isinstance(value, dict):
        return next((found for key, item in value.items()
                     if (found := _unencodable_at(item, f"{path}[{key!r}]")) is not None), None)
    if isinstance(value, (list, tuple)):
        return next((found for n, item in enumerate(value)
                     if (found := _unencodable_at(item, f"{path}[{n}]")) is not None), None)
    if value is None or isinstance(value, (str, int, float, bool)):
        return None
    try:
        return _unencodable_at(json_value(value), path)
    except TypeError:
        return f"{path} ({type(value).__name__})"


def payload_too_large(task: str, size: int, limit: int) -> PayloadError:
    """The error for a payload whose encoded JSON (`payload_json`'s text, ASCII, so its length
    is its size in bytes) is over the task's limit."""
    return PayloadError(
        f"payload of task {task!r} is {size:,} bytes of JSON; the limit is {limit:,} "
        "(max_payload_bytes): store large data elsewhere and enqueue a reference to it"
    )


def _encoder() -> Callable[[dict], str]:
    """``json.dumps(payload, allow_nan=False, separators=(",", ":"))``, built once.

    The C encoder is used directly without its cycle check (a cycle then ends in RecursionError,
    which `payload_json` sends down the slow path); its output is the same text.
    """
    from json.encoder import c_make_encoder, encode_basestring_ascii

    if c_make_encoder is None:  # a Python without the json accelerator
        return json.JSONEncoder(allow_nan=False, separators=(",", ":"), default=json_value).encode
    encode = c_make_encoder(
        None, json_value, encode_basestring_ascii, None, ":", ",", False, False, False
    )
    return lambda payload: "".join(encode(payload, 0))


_encode = _encoder()
_MAX_DEPTH = 200
# What json.dumps writes for a key that was not a string (it coerces 1, 1.5, True, None): only a
# payload whose text has such a key is walked, to find out whether it really was one.
_COERCED_KEY = re.compile(r'"(?:-?[0-9][0-9.eE+-]*|true|false|null|-?Infinity|NaN)":')


def _checked_payload_json(payload: dict) -> str:
    _reject_nul(payload)
    try:
        return json.dumps(payload, allow_nan=False, separators=(",", ":"), default=json_value)
    except ValueError as exc:
        if _is_huge_int(exc):
            raise PayloadError(f"payload contains an integer of more than {sys.get_int_max_str_digits():,} digits, "
                               "which Python will not convert to text (store it as a string)") from exc
        raise PayloadError("payload contains NaN or Infinity, which JSON cannot represent") from exc
    except TypeError as exc:
        where = _unencodable_at(payload)
        raise PayloadError(f"payload{where or ''} is not JSON-serializable: {exc} (JSON types, datetime, "
                           "date, time, Decimal, UUID and Enum are encoded; convert anything else)") from exc
    except RecursionError as exc:
        raise PayloadError("payload is nested too deeply (or contains a cycle)") from exc


def _reject_nul(value: Any, depth: int = 0) -> None:
    if depth > _MAX_DEPTH:
        raise PayloadError("payload is nested too deeply (or contains a cycle)")
    if isinstance(value, str):
        if "\x00" in value:
            raise PayloadError("payload contains a NUL character, which jsonb cannot store")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            # json.dumps escapes a lone surrogate as \udXXX and PostgreSQL rejects it at insert.
            raise PayloadError("payload contains a lone surrogate, which is not valid Unicode") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                # JSON keys are strings: json.dumps would turn 1 into "1", silently, and
                # {1: "a", "1": "b"} into one key whose value depends on the order.
                raise PayloadError(f"payload has a key that is not a string ({type(key).__name__} "
                                   f"{key!r:.40}): JSON object keys are strings; convert it yourself")
            _reject_nul(key, depth + 1)
            _reject_nul(item, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _reject_nul(item, depth + 1)
    elif isinstance(value, Enum):
        _reject_nul(value.value, depth + 1)  # encoded as its value (`json_value`)


def is_whole_number_text(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also accepts ``"²"`` and other digits `int` refuses."""
    return text.isascii() and text.isdigit()


def positive_int(value: Any, what: str, *, error: type[Exception] = InvalidInputError) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise error(f"{what} must be a positive integer, got {value!r}")
    return value


def non_negative_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def job_id(value: Any, what: str = "job_id") -> int:
    """A job id as the API accepts it: a positive integer (ids start at 1), bool refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{what} must be an integer, got {type(value).__name__}")
    if value < 1:
        raise InvalidInputError(f"{what} must be a positive integer, got {value}")
    if value > MAX_JOB_ID:  # no row has it, and PostgreSQL would refuse the parameter
        raise InvalidInputError(f"{what} {value} is beyond the largest job id, {MAX_JOB_ID}")
    return value


MAX_JOB_ID = 2**63 - 1
"""Job ids are bigint."""


def claim_token(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInputError("claim_token must be the non-empty string a claim returned")
    return value


def positive_number(value: Any, what: str, *, unit: str = "",
                    error: type[Exception] = InvalidInputError) -> float:
    """A finite number above zero (int or float, bool refused); `unit` names it in the error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise error(f"{what} must be a positive number{unit}, got {value!r}")
    return value


def positive_seconds(value: Any, what: str, *, error: type[Exception] = InvalidInputError) -> float:
    return positive_number(value, what, unit=" of seconds", error=error)


def config_positive_int(value: Any, what: str) -> int:
    return positive_int(value, what, error=ConfigurationError)


def known_options(options: Iterable[str], known: list[str], what: str) -> None:
    """Reject an option name that is not a field, suggesting the closest one."""
    for name in options:
        if name not in known:
            hint = difflib.get_close_matches(name, known, n=1)
            suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
            raise ConfigurationError(f"unknown {what} option {name!r}{suggestion}")


def as_config(check: Callable[..., Any], value: Any, *args: Any, **kwargs: Any) -> Any:
    """Run an input check on a configuration value: its failure is a `ConfigurationError`."""
    try:
        return check(value, *args, **kwargs)
    except SqlaQueueError as exc:
        raise ConfigurationError(str(exc)) from None


MAX_META_BYTES = 8 * 1024
"""The largest ``meta`` a job carries, as encoded JSON: trace context and a few tags, read on
every claim, not data (that is the payload's)."""


def meta(value: Any) -> dict[str, Any]:
    """A job's ``meta=`` as given: a mapping with string keys (checked as JSON by `meta_json`)."""
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"meta must be a mapping (a JSON object), got {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise InvalidInputError(f"meta keys must be strings, got {type(key).__name__} {key!r:.40}")
    return dict(value)


def meta_json(value: dict[str, Any]) -> str:
    """A job's ``meta`` as the JSON text stored, checked like a payload and bounded by
    `MAX_META_BYTES`."""
    try:
        text = payload_json(value)
    except PayloadError as exc:
        raise InvalidInputError(f"meta: {exc}") from None
    if len(text) > MAX_META_BYTES:
        raise InvalidInputError(f"meta is {len(text):,} bytes of JSON; the limit is {MAX_META_BYTES:,}: "
                                "keep trace context and tags there, data in the payload")
    return text
