"""The database roles of docs/how-to/database-roles.md, made from the page's own SQL on a test's
own database: `Roles` runs the page's ```sql blocks (chosen by the ``-- label`` each begins
with) under names of this run's own, connects as the logins, and drops every role it made.

Roles are cluster-wide and the test server is shared by pytest-xdist workers and CI jobs, so
each `Roles` renames every role the page creates with a suffix of its own.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

import sqla_queue as sq

import doc_blocks

DOC = Path(__file__).resolve().parents[1] / "docs" / "how-to" / "database-roles.md"
CREATED = re.compile(r"CREATE ROLE (\w+)")
GROUPS = {"producer": "shop_web", "worker": "shop_worker", "operator": "shop_ops", "observer": "shop_monitoring"}
"""Each part's login on the page (its ``-- logins`` block)."""


def grant_blocks() -> dict[str, str]:
    """The page's ```sql blocks by label (the ``-- label`` comment on each block's first line)."""
    found: dict[str, str] = {}
    for body in doc_blocks.blocks(DOC, "sql"):
        label = re.fullmatch(r"-- (.+)", body.splitlines()[0])
        assert label is not None, f"a sql block of {DOC.name} does not begin with '-- label': {body[:60]!r}"
        found[label.group(1)] = body
    return found


def statements(block: str) -> list[str]:
    """A block's statements, one per ``;`` (the page's SQL quotes no semicolon)."""
    return [statement.strip() for statement in block.split(";") if statement.strip()]


class Roles:
    """The page's roles on the database at `url` (a superuser's URL on the test server)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.suffix = f"_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.admin = create_engine(url)
        self.created: list[str] = []
        self.queues: list[sq.Queue] = []
        page = "\n".join(grant_blocks().values())
        self._names = sorted(set(CREATED.findall(page)), key=len, reverse=True)

    def name(self, role: str) -> str:
        """`role` (a name on the page) as this run's role is called."""
        return role + self.suffix

    def renamed(self, sql: str) -> str:
        for role in self._names:
            sql = re.sub(rf"\b{role}\b", self.name(role), sql)
        return sql

    def run(self, *labels: str) -> None:
        """Run the page's blocks `labels`, in that order, each in a transaction of its own."""
        blocks = grant_blocks()
        for label in labels:
            with self.admin.begin() as conn:
                for statement in statements(self.renamed(blocks[label])):
                    self.created += CREATED.findall(statement)
                    conn.execute(text(statement))

    def sql(self, statement: str) -> None:
        """Run `statement` (the page's role names in it renamed) as the superuser."""
        with self.admin.begin() as conn:
            conn.execute(text(self.renamed(statement)))

    def login_url(self, part: str) -> str:
        """The database URL of `part`'s login (producer, worker, operator, observer)."""
        return make_url(self.url).set(username=self.name(GROUPS[part])).render_as_string(hide_password=False)

    def queue(self, part: str, **options: Any) -> sq.Queue:
        """A Queue connected as `part`'s login (disposed by `drop`)."""
        options.setdefault("load_entrypoints", False)
        queue = sq.Queue(self.login_url(part), **options)
        self.queues.append(queue)
        return queue

    def drop(self) -> None:
        """Close every connection made as a role, then drop the roles (their grants first)."""
        for queue in self.queues:
            queue.engine.dispose()
        if self.created:
            with self.admin.begin() as conn:
                conn.execute(text(f"DROP OWNED BY {', '.join(self.created)}"))
                for role in reversed(self.created):
                    conn.execute(text(f"DROP ROLE {role}"))
        self.admin.dispose()
