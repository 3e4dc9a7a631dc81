"""Option types and formatting shared by the operations commands."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import click

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)")


class Duration(click.ParamType):
    """A positive duration: ``90s``, ``15m``, ``12h``, ``7d``, or a plain number of seconds."""

    name = "duration"

    def convert(self, value, param, ctx) -> timedelta:
        if isinstance(value, timedelta):
            return value
        match = _DURATION.fullmatch(str(value).strip().lower())
        if match is None:
            self.fail(f"{value!r} is not a duration (use e.g. 90s, 15m, 12h or 7d)", param, ctx)
        seconds = float(match[1]) * _UNITS[match[2] or "s"]
        if seconds <= 0:
            self.fail(f"{value!r} must be longer than zero", param, ctx)
        return timedelta(seconds=seconds)


DURATION = Duration()


def timestamp(value: datetime | None) -> str:
    """A database time in UTC, to the second: the same on every operator's terminal."""
    if value is None:
        return "-"
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
