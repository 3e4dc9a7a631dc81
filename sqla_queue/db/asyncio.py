"""The asyncio side of the execution seam: a queue's asyncio engine (given, or made from its URL
on first use) and its compiled hot statements (`Executor.run_async` runs the synchronous code
on it through SQLAlchemy's ``run_sync``)."""

from __future__ import annotations

import threading
from functools import cached_property
from typing import TYPE_CHECKING

from sqlalchemy import Table
from sqlalchemy.engine import URL

from ..sql.claim import DEFAULT_ORDER, ClaimOrder
from .driver import DriverStatement
from .engine import async_library_engine, make_async_engine
from .statement_cache import StatementCache
from .statements import DriverStatements, Statements

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine


class AsyncSide:
    """A queue's asyncio engine (given, or made from its URL on first use) and its compiled hot
    statements."""

    def __init__(self, table: Table, *, engine: AsyncEngine | None = None, url: URL | None = None,
                 order: ClaimOrder = DEFAULT_ORDER) -> None:
        self._table = table
        self._order = order
        self._given = engine
        self._url = url
        self._lock = threading.Lock()
        self._engine: AsyncEngine | None = None
        self._made: AsyncEngine | None = None  # ours to dispose
        self._fast = False

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    made = self._given if self._given is not None else make_async_engine(self._url)  # type: ignore[arg-type]
                    # An application's engine: its statements go through SQLAlchemy, as in the
                    # synchronous face; ours run the compiled ones.
                    self._fast = self._given is None and DriverStatement.usable_on(made.dialect)
                    self._made = made if self._given is None else None
                    self._engine = async_library_engine(made)
        return self._engine

    @property
    def made(self) -> bool:
        """True once the engine was made here from the URL (and is ours to dispose)."""
        return self._made is not None

    def reaches(self, url: URL) -> bool:
        """True if `url` names this engine's database (host, port, database and user: the
        driver may differ)."""
        mine = self._given.url if self._given is not None else self._url
        return mine is not None and all(getattr(mine, part) == getattr(url, part)
                                        for part in ("host", "port", "database", "username"))

    async def dispose(self) -> None:
        """Close the pooled connections of the engine made here (an application's is its own)."""
        if self._made is not None:
            await self._made.dispose()

    @cached_property
    def driver_statements(self) -> DriverStatements | None:
        engine = self.engine
        return DriverStatements(Statements.for_table(self._table, self._order), engine.dialect,
                                StatementCache.configured()) if self._fast else None


