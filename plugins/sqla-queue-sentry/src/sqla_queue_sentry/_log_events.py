"""sqla_queue's own failure log lines in Sentry: one event per reported outcome, not two, and
breadcrumbs that quote no payload.

sqla_queue's built-in logging plugin logs every retried and failed attempt on the
``sqla_queue`` logger, a terminal failure at ``ERROR``; with a default ``sentry_sdk.init()``
Sentry's logging integration turns that record into an event of its own, a second issue beside
the one this plugin reports. Ignoring the whole logger (``ignore_logger``) would also drop its
other records (lost claims, recoveries) and every lifecycle breadcrumb. Instead a global event
processor drops exactly the events made from a record whose outcome this plugin has reported
already: the record carries ``outcome``, ``job_id``, ``queue``, ``task`` and ``attempt``
(``extra`` fields), and the Sentry logging integration passes it in the hint as ``log_record``.
The plugin's hooks run ``tryfirst``, so its report is noted before the record is logged.

The same records also become breadcrumbs (on the worker's thread, outside any job's scope, so
they reach the next event of any job that fails there), and their message and ``error`` /
``traceback`` data hold the exception's first line, which may quote *that* job's payload: a later
job's scrubber does not know those values. So the processor cuts such breadcrumbs down to the
job, task, queue, attempt and outcome, in every event.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

LIFECYCLE_LOGGER = "sqla_queue"
"""The logger of sqla_queue's built-in logging plugin (docs/reference/hooks.md, "Built-in plugins")."""
OUTCOMES = ("retried", "failed")

Key = tuple[Any, Any, Any, Any]


class RecentKeys:
    """A bounded, thread-safe map (or set, with no values): the oldest key goes when a new one
    would pass `size`."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._keys: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, key: Any, value: Any = None) -> None:
        with self._lock:
            self._keys[key] = value
            self._keys.move_to_end(key)
            while len(self._keys) > self.size:
                self._keys.popitem(last=False)

    def pop(self, key: Any) -> Any:
        with self._lock:
            return self._keys.pop(key, None)

    def __contains__(self, key: Any) -> bool:
        with self._lock:
            return key in self._keys


reported = RecentKeys(4096)
"""Outcomes this process reported (``(queue, task, job_id, attempt)``): the same job's log
event arrives a moment later, so a few thousand cover any burst of failures."""

_installed = False
_install_lock = threading.Lock()


def outcome_key(queue: str, task: str, job_id: int, attempt: int) -> Key:
    return (queue, task, job_id, attempt)


def note_reported(key: Key) -> None:
    reported.put(key)


def install() -> None:
    """Add the processor to Sentry's global ones, once per process (its list outlives clients,
    so a later ``sentry_sdk.init()`` keeps it)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        from sentry_sdk.scope import add_global_event_processor

        add_global_event_processor(lifecycle_records)
        _installed = True


def lifecycle_records(event: dict[str, Any], hint: dict[str, Any] | None) -> dict[str, Any] | None:
    """The global event processor: drop a reported outcome's log event, quiet the breadcrumbs."""
    if _is_reported_log_event(hint):
        return None
    for crumb in (event.get("breadcrumbs") or {}).get("values") or ():
        if isinstance(crumb, dict) and crumb.get("category") == LIFECYCLE_LOGGER:
            _without_error_text(crumb)
    return event


def _is_reported_log_event(hint: dict[str, Any] | None) -> bool:
    record = (hint or {}).get("log_record")
    if record is None or record.name != LIFECYCLE_LOGGER or getattr(record, "outcome", None) not in OUTCOMES:
        return False
    return outcome_key(*(getattr(record, field, None) for field in ("queue", "task", "job_id", "attempt"))) in reported


def _without_error_text(crumb: dict[str, Any]) -> None:
    data = crumb.get("data")
    if not isinstance(data, dict) or data.get("outcome") not in OUTCOMES:
        return
    data.pop("error", None)
    data.pop("traceback", None)
    crumb["message"] = (f"job {data.get('job_id')} ({data.get('task')} on {data.get('queue')}) "
                        f"{data.get('outcome')} on attempt {data.get('attempt')}")
