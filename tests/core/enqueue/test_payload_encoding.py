"""`payload_json` encodes first and walks the payload only when the text calls for it; these
pin that it accepts, refuses and words its refusals exactly like the walk-first reference."""

from __future__ import annotations

import json
from collections import OrderedDict
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from sqla_queue import _validate
from sqla_queue.errors import PayloadError


def nested(depth: int, leaf, container: str = "list"):
    """A payload whose `leaf` sits inside `depth` containers (the payload dict counts as one)."""
    value = leaf
    for _ in range(depth - 1):
        value = [value] if container == "list" else {"k": value}
    return {"k": value}


def cyclic_dict():
    d: dict = {}
    d["self"] = d
    return d


def cyclic_list():
    items: list = []
    items.append(items)
    return {"items": items}


class Text(str):
    pass


PAYLOADS = {
    "empty": {},
    "plain": {"to": "a@b.c", "n": 1, "f": 1.5, "ok": True, "none": None, "list": [1, "x", {"y": 2}]},
    "unicode": {"name": "Zoë", "city": "Łódź", "jp": "東京"},
    "emoji": {"mood": "😀"},  # escaped as a surrogate pair: a false alarm that passes
    "escaped backslash u0000": {"path": "C:\\u0000dir"},  # a false alarm that passes
    "escaped backslash ud800": {"path": "\\ud800"},
    "tuple": {"pair": (1, 2)},
    "non-string keys": {1: "a", 2.5: "b", True: "c", None: "d"},
    "colliding keys": {1: "a", "1": "b"},
    "numeric string keys": {"1": "a", "2.5": "b", "true": "c", "null": "d"},  # a false alarm that passes
    "non-string key deep": {"a": [{"b": {7: "x"}}]},
    "dict subclass": OrderedDict(a=1),
    "str subclass value": {"v": Text("x")},
    "str subclass with NUL": {"v": Text("a\x00b")},
    "NUL in value": {"v": "a\x00b"},
    "NUL in key": {"a\x00b": 1},
    "NUL deep": {"a": [{"b": ["\x00"]}]},
    "lone surrogate in value": {"v": "\ud800"},
    "lone surrogate in key": {"\udfff": 1},
    "surrogate pair code points": {"v": "\ud83d\ude00"},
    "NaN": {"v": float("nan")},
    "Infinity": {"v": [float("inf")]},
    "NaN key": {float("nan"): 1},
    "set": {"v": {1, 2}},
    "bytes": {"v": b"x"},
    "datetime": {"v": datetime(2026, 1, 1, tzinfo=timezone.utc)},
    "decimal": {"v": Decimal("1.5")},
    "non-string key type": {(1, 2): "tuple key"},
    "NUL and not serializable": {"v": "\x00", "w": {1}},
    "cyclic dict": cyclic_dict(),
    "cyclic list": cyclic_list(),
    "depth 200 lists": nested(200, 1),
    "depth 201 lists": nested(201, 1),
    "depth 200 dicts": nested(200, 1, "dict"),
    "depth 201 dicts": nested(201, 1, "dict"),
    "depth 201 empty innermost": nested(200, []),
    "depth 202 empty innermost": nested(201, []),
    "depth 1000": nested(1000, 1),
    "many brackets, shallow": {"v": [[1]] * 300},
    "brackets in strings": {"v": "[" * 300 + "{" * 300},
    "not a dict": ["a list"],
    "None": None,
}


def outcome(function, payload):
    try:
        return ("ok", function(payload))
    except Exception as exc:  # the type and the words are what callers see
        return (type(exc), str(exc))


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_fast_payload_json_answers_exactly_like_the_walk_first_reference(name):
    payload = PAYLOADS[name]

    def reference(value):
        if not isinstance(value, dict):
            raise PayloadError(f"payload must be a dict (a JSON object), got {type(value).__name__}")
        return _validate._checked_payload_json(value)

    assert outcome(_validate.payload_json, payload) == outcome(reference, payload)


@pytest.mark.parametrize("name", ["plain", "unicode", "emoji", "tuple", "numeric string keys"])
def test_fast_payload_json_is_the_json_dumps_text(name):
    payload = PAYLOADS[name]
    expected = json.dumps(payload, allow_nan=False, separators=(",", ":"))
    assert _validate.payload_json(payload) == expected


def test_refusals_stay_refusals():
    for name in ("NUL in key", "lone surrogate in value", "depth 201 lists", "cyclic dict", "NaN", "set",
                 "non-string keys", "colliding keys", "non-string key deep"):
        with pytest.raises(PayloadError):
            _validate.payload_json(PAYLOADS[name])


def test_a_non_string_key_is_refused_not_coerced():
    """D12: ``{1: "a", "1": "b"}`` was stored as ``{"1": "b"}``, silently."""
    with pytest.raises(PayloadError, match=r"a key that is not a string \(int 1\)"):
        _validate.payload_json({1: "a", "1": "b"})
