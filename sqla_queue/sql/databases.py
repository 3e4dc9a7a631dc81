"""Statements about whole databases and relations, for tooling rather than for jobs.

``CREATE DATABASE`` takes an identifier, which cannot be a bound parameter; these elements quote
it with the dialect's identifier preparer, so a name is always one identifier however it is spelt.
They serve the test bootstrap (`sqla_queue.testing`) and the CLI's checks of a host database.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Text, bindparam, func, select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import DDLElement
from sqlalchemy.sql import Executable


class CreateDatabase(DDLElement):
    """``CREATE DATABASE name`` (run it outside a transaction: autocommit), a copy of the
    database `template` when one is named (``TEMPLATE template``: nobody may be connected to it)."""

    inherit_cache = False

    def __init__(self, name: str, template: str | None = None) -> None:
        self.name = name
        self.template = template


class DropDatabase(DDLElement):
    """``DROP DATABASE IF EXISTS name WITH (FORCE)``: the sessions still on it are ended."""

    inherit_cache = False

    def __init__(self, name: str) -> None:
        self.name = name


@compiles(CreateDatabase)
def _compile_create(element: CreateDatabase, compiler: Any, **kw: Any) -> str:
    created = f"CREATE DATABASE {compiler.preparer.quote(element.name)}"
    if element.template is None:
        return created
    return f"{created} TEMPLATE {compiler.preparer.quote(element.template)}"


@compiles(DropDatabase)
def _compile_drop(element: DropDatabase, compiler: Any, **kw: Any) -> str:
    return f"DROP DATABASE IF EXISTS {compiler.preparer.quote(element.name)} WITH (FORCE)"


def relation_exists() -> Executable:
    """Whether the relation named by ``:name`` (search-path rules, as in SQL) exists."""
    return select(func.to_regclass(bindparam("name", type_=Text)).is_not(None))
