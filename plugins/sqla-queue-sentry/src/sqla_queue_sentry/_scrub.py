"""Keeping a job's payload out of what reaches Sentry.

A handler's frames hold the payload in their local variables (``payload`` itself, and whatever
was read from it), and an exception's message often quotes a value (``KeyError: 'a@b.c'``). So
by default every frame loses its ``vars``, and every payload value long enough to mean
something (`MIN_LENGTH` characters of text, or a number of as many digits) is replaced by
`FILTERED` wherever the event carries text: exception messages, source context lines,
breadcrumbs, log messages and ``extra``. Tags and contexts are the plugin's own fields and are
left alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

FILTERED = "[Filtered]"
MIN_LENGTH = 3
"""Shorter values ("1", "no") would blank out unrelated text and identify nothing."""

EventProcessor = Callable[[dict[str, Any], dict[str, Any]], "dict[str, Any] | None"]


def payload_scrubber(payload: Mapping[str, Any] | None) -> EventProcessor:
    """A Sentry event processor for one job's events. The payload's values are collected only
    when an event is processed: a job that succeeds costs nothing here."""

    def scrub(event: dict[str, Any], hint: dict[str, Any]) -> dict[str, Any]:
        return scrubbed(event, payload_values(payload))

    return scrub


def payload_values(payload: Any) -> tuple[str, ...]:
    """Text forms of the payload's leaf values worth hiding, longest first (so a value that
    contains a shorter one is replaced whole)."""
    found = {text for text in _leaves(payload) if len(text) >= MIN_LENGTH}
    return tuple(sorted(found, key=len, reverse=True))


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, str):
        yield value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield str(value)


def scrubbed(event: dict[str, Any], values: tuple[str, ...]) -> dict[str, Any]:
    """`event` with no frame variables and none of `values` in its text (changed in place)."""
    for frame in _frames(event):
        frame.pop("vars", None)
        if values:
            for key in ("pre_context", "context_line", "post_context"):
                if key in frame:
                    frame[key] = _replaced(frame[key], values)
    if values:
        for exception in _values(event.get("exception")):
            if "value" in exception:
                exception["value"] = _replaced(exception["value"], values)
        for key in ("message", "logentry", "extra", "breadcrumbs"):
            if key in event:
                event[key] = _replaced(event[key], values)
    return event


def _values(container: Any) -> list[dict[str, Any]]:
    """The ``values`` list of an ``exception`` or ``threads`` interface (absent: empty)."""
    if isinstance(container, Mapping):
        return [value for value in container.get("values") or () if isinstance(value, dict)]
    return []


def _frames(event: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for value in (*_values(event.get("exception")), *_values(event.get("threads"))):
        stacktrace = value.get("stacktrace") or {}
        for frame in stacktrace.get("frames") or ():
            if isinstance(frame, dict):
                yield frame


def _replaced(value: Any, values: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        for secret in values:
            if secret in value:
                value = value.replace(secret, FILTERED)
        return value
    if isinstance(value, dict):
        return {key: _replaced(item, values) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_replaced(item, values) for item in value]
    return value
