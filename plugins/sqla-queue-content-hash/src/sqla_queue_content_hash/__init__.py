"""Content-hash dedupe keys for sqla_queue, registered through the ``sqla_queue`` entry point.

With this distribution installed, every job enqueued without an explicit ``idempotency_key=``
gets the key ``sha256:<hex>`` of its task name and the canonical JSON of its payload: while
such a job is pending or running, enqueueing the same task with an equal payload returns the
existing job's id instead of a second job. Once it completed or failed, the same content
enqueues a new job.

"Equal" is JSON equality after canonicalisation: object keys in any order are the same,
list order matters, and ``1`` and ``1.0`` are different payloads (JSON keeps them apart, and
so does jsonb). Installing the plugin is the opt-in, for every task; to key only some tasks,
block the entry point (``SQLA_QUEUE_BLOCKED_PLUGINS=content_hash``) and pass
``ContentHashKey(tasks={...})`` in ``Queue(plugins=[...])``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import sqla_queue

PREFIX = "sha256:"


def canonical_json(payload: Mapping[str, Any]) -> str:
    """One spelling per JSON value: sorted keys, no whitespace, non-ASCII kept as is; datetimes,
    Decimals, UUIDs and Enums as the queue stores them (`sqla_queue.json_value`)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                      default=sqla_queue.json_value)


def content_key(task: str, payload: Mapping[str, Any]) -> str:
    """``sha256:`` and 64 hex digits; the task name is hashed in, so two tasks never share a
    key for the same payload. A NUL separates the two parts: task names cannot contain one."""
    digest = hashlib.sha256(f"{task}\0{canonical_json(payload)}".encode("utf-8", "surrogatepass"))
    return PREFIX + digest.hexdigest()


class ContentHashKey:
    """The plugin.

    :param tasks: task names to key; ``None`` (the default) keys every task.
    """

    def __init__(self, tasks: Iterable[str] | None = None) -> None:
        if isinstance(tasks, str):
            raise TypeError("tasks must be a collection of task names, not one string")
        self.tasks = None if tasks is None else frozenset(tasks)

    @sqla_queue.hookimpl
    def sqla_queue_idempotency_key(self, task: str, payload: Mapping[str, Any]) -> str | None:
        if self.tasks is not None and task not in self.tasks:
            return None
        return content_key(task, payload)


plugin = ContentHashKey()
"""The instance the entry point registers: every task is keyed."""

__all__ = ["PREFIX", "ContentHashKey", "canonical_json", "content_key", "plugin"]
