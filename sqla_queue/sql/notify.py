"""LISTEN/NOTIFY: how an enqueue wakes idle workers, and how finished jobs wake `Queue.wait`.

Channels are derived from the job table's name (one pair per table, so two job tables never
wake each other's listeners). An enqueue's payload is the queue name; a finishing statement's is
the comma-separated ids it finished.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, Text, bindparam, case, cast, func, literal, select, true
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ClauseElement, Executable


def channel_name(table: Table) -> str:
    return f"{table.name}_enqueued"


def wake_queues(table: Table) -> Executable:
    """Send a notification on `table`'s enqueue channel for each of ``:queues``, in a transaction that does
    not wait for its commit's WAL flush.

    A notifying commit holds PostgreSQL's database-wide notify lock until it returns, so this
    one, which writes nothing else, returns at once: enqueues committed without notifying
    (`insert_jobs` with ``:notify`` false) are announced here after their commit, many at a
    time, and never queue behind each other's flushes. Losing this commit in a crash loses only
    the wake-up, which PostgreSQL never keeps anyway.
    """
    queue = func.unnest(bindparam("queues", type_=ARRAY(Text))).table_valued("queue").render_derived()
    return select(
        func.set_config("synchronous_commit", "off", true()).label("synchronous_commit"),
        func.pg_notify(literal(channel_name(table)), queue.c.queue).label("notified"),
    ).select_from(queue)


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


MAX_FINISHED_PAYLOAD = 7999
"""PostgreSQL refuses a notification payload of 8000 bytes or more; a longer id list is sent
empty, which listeners read as "something finished, look again"."""


def finished_channel(table: Table) -> str:
    """The channel on which statements that finish jobs announce their ids (`Queue.wait`)."""
    return f"{table.name}_finished"


def listen_finished(table: Table) -> Executable:
    """``LISTEN`` on `finished_channel`: what `Queue.wait` waits on."""
    return Listen(finished_channel(table))


def announce_finished(table: Table, rows: Any, *, only: Any = None) -> Any:
    """A CTE sending one ``pg_notify`` that lists the watched ids in `rows` (a CTE with ``id``,
    ``status`` and ``watched``; `only` filters them further), or none when there are none.

    Only jobs a `Queue.wait` watches are announced: a notification wakes every session of the
    database that listens on any channel (each idle worker's listener reads it in a transaction
    of its own), which on every completion would double a busy worker's commits. Join the CTE
    into the statement that finished the jobs (`announced`): a CTE nobody reads is never run.
    One notification per statement, not per job, and PostgreSQL sends it only at commit.
    """
    ids = func.string_agg(cast(rows.c.id, Text), literal(","))
    payload = case((func.length(ids) <= MAX_FINISHED_PAYLOAD, ids), else_=literal(""))
    sent = (select(func.pg_notify(literal(finished_channel(table)), payload).label("sent"))
            .select_from(rows).where(rows.c.watched))
    if only is not None:
        sent = sent.where(only)
    return sent.having(func.count() > 0).cte(f"{rows.name}_announced")


def announced(rows: Any, announcement: Any) -> Any:
    """`rows` joined to its `announce_finished` CTE so that the notification is sent."""
    return rows.outerjoin(announcement, true())
