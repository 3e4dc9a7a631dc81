"""The content-hash dedupe plugin: stable keys, its contract, and its entry point (which takes
part only when enabled by name)."""

from __future__ import annotations

import importlib.metadata

import pytest

import sqla_queue as sq
from sqla_queue.testing import check_dedupe_plugin
from sqla_queue_content_hash import PREFIX, ContentHashKey, canonical_json, content_key, plugin


def test_passes_the_dedupe_conformance_check(engine):
    report = check_dedupe_plugin(plugin, engine)
    assert all(key.startswith(PREFIX) and len(key) == len(PREFIX) + 64 for key in report.keys)
    assert report.loads_on_install is False


def test_key_order_does_not_matter_but_values_and_list_order_do():
    assert content_key("t", {"a": 1, "b": {"x": [1, 2], "y": None}}) == content_key(
        "t", {"b": {"y": None, "x": [1, 2]}, "a": 1}
    )
    assert content_key("t", {"a": [1, 2]}) != content_key("t", {"a": [2, 1]})
    assert content_key("t", {"a": 1}) != content_key("t", {"a": 1.0})
    assert content_key("t", {"a": "1"}) != content_key("t", {"a": 1})


def test_the_task_name_is_part_of_the_key():
    assert content_key("send_email", {"to": "a"}) != content_key("send_sms", {"to": "a"})


def test_the_key_is_pinned_across_releases():
    """Keys outlive a deploy: a change of canonical form would let duplicates through while
    jobs keyed by the old release are still pending."""
    assert canonical_json({"b": "é", "a": [1, {"d": 2, "c": None}]}) == '{"a":[1,{"c":null,"d":2}],"b":"é"}'
    assert content_key("send_email", {"to": "a@example.com"}) == (
        "sha256:15634f957c9851fd9321998c1d0b980bb4d8a9900e2c2ae7c74f6e2a70f0cf5c"
    )


def test_tasks_restricts_which_tasks_are_keyed():
    only = ContentHashKey(tasks={"send_email"})
    assert only.sqla_queue_idempotency_key(task="send_email", payload={"to": "a"}) is not None
    assert only.sqla_queue_idempotency_key(task="resize", payload={"to": "a"}) is None
    with pytest.raises(TypeError):
        ContentHashKey(tasks="send_email")


def test_registers_only_through_the_sqla_queue_entry_point():
    (entry_point,) = importlib.metadata.entry_points(group="sqla_queue", name="content_hash")
    assert entry_point.load() is plugin


def test_installed_it_keys_nothing_until_enabled_by_name(engine, monkeypatch):
    monkeypatch.delenv("SQLA_QUEUE_PLUGINS", raising=False)
    monkeypatch.delenv("SQLA_QUEUE_BLOCKED_PLUGINS", raising=False)
    assert sq.Queue(engine).plugin_manager.get_plugin("content_hash") is None
    assert sq.Queue(engine, plugins=["content_hash"]).plugin_manager.get_plugin("content_hash") is plugin
    monkeypatch.setenv("SQLA_QUEUE_PLUGINS", "content_hash")
    assert sq.Queue(engine).plugin_manager.get_plugin("content_hash") is plugin


def test_payloads_with_encoded_values_get_the_key_of_their_stored_json():
    """A datetime or Decimal in a payload is stored as text (`sq.json_value`); its key is that
    text's, so the same payload written either way dedupes to one job."""
    import datetime
    import decimal

    at = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
    assert content_key("bill", {"at": at, "total": decimal.Decimal("1.50")}) == content_key(
        "bill", {"at": "2030-01-01T00:00:00+00:00", "total": "1.50"})
