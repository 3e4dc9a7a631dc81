"""Option types, formatting and the console shared by the commands."""

from __future__ import annotations

import json
import math
import re
import sys
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:  # Rich is imported by the commands that print tables, not by the worker's
    from rich.console import Console

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|[smhd]?)")  # no sign: never negative
FORMAT = "seconds, or a number with ms, s, m, h or d: 250ms, 90s, 15m, 12h, 7d"
"""What every duration option accepts."""
DURATION_HELP = "DURATION: 250ms, 90s, 15m, 12h, 7d, or plain seconds."
"""The sentence each duration option's help ends with."""


class Duration(click.ParamType):
    """A duration: ``250ms``, ``90s``, ``15m``, ``12h``, ``7d``, or a plain number of seconds.

    Positive by default; ``Duration(allow_zero=True)`` also takes zero (``--delay 0``). One type
    for every option that takes a duration, so each command reads ``5m`` the same way.
    """

    name = "duration"

    def __init__(self, *, allow_zero: bool = False) -> None:
        self.allow_zero = allow_zero

    def convert(self, value, param, ctx) -> timedelta:
        if isinstance(value, timedelta):
            return value
        match = _DURATION.fullmatch(str(value).strip().lower())
        if match is None:
            self.fail(f"{value!r} is not a duration; use {FORMAT}", param, ctx)
        seconds = float(match[1]) * _UNITS[match[2] or "s"]
        if not math.isfinite(seconds) or seconds > timedelta.max.total_seconds():
            self.fail(f"{value!r} is too long", param, ctx)
        if seconds == 0 and not self.allow_zero:
            self.fail(f"{value!r} must be longer than zero", param, ctx)
        return timedelta(seconds=seconds)


DURATION = Duration()
DURATION_OR_ZERO = Duration(allow_zero=True)


def format_seconds(value: timedelta) -> str:
    """A default for a duration option, as the option would be typed: ``60s``."""
    return f"{value.total_seconds():g}s"


def timestamp(value: datetime | None) -> str:
    """A database time in UTC, to the second: the same on every operator's terminal."""
    if value is None:
        return "-"
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


PAYLOAD_PREVIEW_CHARS = 4096
"""How much of a payload's pretty JSON the CLI prints; payloads may run to megabytes."""


def payload_text(payload: Any, limit: int = PAYLOAD_PREVIEW_CHARS, *, indent: int | None = 2) -> str:
    """The payload as JSON (indented, or on one line with ``indent=None``), cut after `limit`
    characters with its full size said."""
    preview, cut = _json_prefix(payload, limit, indent)
    return f"{preview}… ({payload_size(payload):,} bytes in all)" if cut else preview


def payload_fields(payload: Any, *, full: bool = False, limit: int = PAYLOAD_PREVIEW_CHARS) -> dict[str, Any]:
    """Payload keys for ``--json`` output: ``payload`` is the object, or null when it was cut;
    then ``payload_preview`` holds its first `limit` characters of indented JSON."""
    preview, cut = (None, False) if full else _json_prefix(payload, limit, 2)
    return {"payload": None if cut else payload, "payload_bytes": payload_size(payload),
            "payload_truncated": cut, "payload_preview": preview if cut else None}


def payload_size(payload: Any) -> int:
    """Bytes of the payload as compact UTF-8 JSON."""
    return len(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode())


def _json_prefix(payload: Any, limit: int, indent: int | None) -> tuple[str, bool]:
    """The first `limit` characters of the JSON text, encoding no further than that."""
    chunks: list[str] = []
    size = 0
    separators = None if indent else (", ", ": ")
    for chunk in json.JSONEncoder(indent=indent, separators=separators, ensure_ascii=False).iterencode(payload):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return "".join(chunks)[:limit], True
    return "".join(chunks), False


def console() -> Console:
    """A terminal gets its own width; a pipe gets a wide one, so tables never truncate names."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=200)
