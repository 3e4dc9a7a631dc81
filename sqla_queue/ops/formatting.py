"""How operators see times, durations, sizes and payloads: one format for the command line, the
dashboard and doctor (UTC to the second, ``4m05s``, payloads cut at a preview size), so a
terminal and the dashboard quote the same job the same way."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any


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


def format_duration(value: timedelta | None) -> str:
    """Short, human durations: 350ms, 12.3s, 4m05s, 2h03m, 3d04h."""
    if value is None:
        return "-"
    seconds = value.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def format_size(n: int) -> str:
    for unit in ("bytes", "kB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"  # pragma: no cover
