"""How the pages write times, durations, rates and payloads: the CLI's own formats (`sqla_queue.ops.formatting`) (UTC to the
second, ``4m05s``, payloads cut at the CLI's preview size), so a terminal and the dashboard
quote the same job the same way. Jinja's autoescape escapes every value these return."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from markupsafe import Markup, escape

from ..ops.formatting import PAYLOAD_PREVIEW_CHARS, format_duration, payload_size, payload_text, timestamp

__all__ = ["PAYLOAD_PREVIEW_CHARS", "age", "duration", "payload_size", "payload_text", "per_minute",
           "percent", "seconds_text", "timestamp"]


def duration(value: timedelta | None) -> str:
    return format_duration(value)


def seconds_text(seconds: float) -> str:
    """A plot's duration axis label: ``0``, ``250ms``, ``1.5s``, ``2m00s``."""
    return "0" if seconds == 0 else format_duration(timedelta(seconds=seconds))


def age(value: datetime | None, now: datetime | None) -> str:
    """How long before `now` (database time) `value` was: ``12s ago``; ``-`` for no time."""
    if value is None or now is None:
        return "-"
    if value > now:
        return f"in {format_duration(value - now)}"
    return f"{format_duration(now - value)} ago"


def per_minute(count: int, window: timedelta) -> str:
    """Jobs per minute over the stats window, with one decimal below ten."""
    rate = count / (window.total_seconds() / 60)
    return f"{rate:.1f}" if rate < 10 else f"{rate:,.0f}"


def percent(part: int, whole: int) -> str:
    """``part`` of ``whole`` as a percentage; ``-`` when nothing finished."""
    return "-" if whole == 0 else f"{100 * part / whole:.1f}%"


def code_spans(text: str) -> Markup:
    """Doctor's text with its `backticked` commands as <code>, the rest escaped: the same
    strings the command line prints, where backticks read as markdown."""
    parts = str(escape(text)).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: show it as it is
        return escape(text)
    return Markup("".join(f"<code>{part}</code>" if odd else part for odd, part in
                          ((n % 2 == 1, part) for n, part in enumerate(parts))))


def compact(value: Any) -> str:
    """A payload or result on one line, bounded: for table cells."""
    return payload_text(value, 160, indent=None)
