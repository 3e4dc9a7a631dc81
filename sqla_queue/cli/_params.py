"""Option types, formatting and the console shared by the commands."""

from __future__ import annotations

import math
import re
import sys
from datetime import timedelta
from typing import TYPE_CHECKING

import click

from ..ops.formatting import PAYLOAD_PREVIEW_CHARS, payload_fields, payload_size, payload_text, timestamp  # noqa: F401  (the CLI's output formats, shared with the dashboard)

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
        text = str(value).strip().lower()
        if text.startswith("-") and _DURATION.fullmatch(text[1:]):
            self.fail(f"{value!r} is negative; a duration is {FORMAT}", param, ctx)
        match = _DURATION.fullmatch(text)
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


def console() -> Console:
    """A terminal gets its own width; a pipe gets a wide one, so tables never truncate names."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=200)
