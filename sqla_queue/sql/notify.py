"""LISTEN/NOTIFY: how an enqueue wakes idle workers.

The channel is derived from the job table's name (one channel per table, so two job tables
never wake each other's workers); the payload is the queue name.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import Executable, ClauseElement


def channel_name(table: Table) -> str:
    return f"{table.name}_enqueued"


class Listen(Executable, ClauseElement):
    """``LISTEN "channel"``; SQLAlchemy has no construct for it. The channel is an identifier
    quoted by the dialect, never a value spliced into SQL."""

    inherit_cache = False

    def __init__(self, channel: str) -> None:
        self.channel = channel


@compiles(Listen, "postgresql")
def _compile_listen(element: Listen, compiler: Any, **kw: Any) -> str:
    return f"LISTEN {compiler.preparer.quote_identifier(element.channel)}"


def listen(table: Table) -> Executable:
    return Listen(channel_name(table))
