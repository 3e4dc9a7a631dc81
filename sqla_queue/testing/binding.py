"""`bind`: a test's database for an application whose ``queue`` and ``sessionmaker`` are built
once, at import, on the production URL.

Such an application has no factory to call with the test's engine; `bind` points the objects it
already has at the test's database for the duration of a ``with`` block, and back afterwards:
the queue (its statements, its handlers' ``ctx.transaction()``, inline mode) and any
``sessionmaker`` / ``async_sessionmaker`` the code under test opens sessions from.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from ..db import kinds
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..queue import Queue

__all__ = ["bind"]


@contextmanager
def bind(queue: Queue, engine: Any, *sessionmakers: Any) -> Iterator[Queue]:
    """Run `queue` and `sessionmakers` on `engine` inside the block; restore them on exit.

    :param engine: the test's database: an ``Engine``, an ``AsyncEngine``, or a URL (then the
        queue makes an engine of each kind, and disposes of both on exit).
    :param sessionmakers: ``sessionmaker`` objects, rebound to the synchronous engine, and
        ``async_sessionmaker`` objects, rebound to the asyncio one (an Engine has none: pass
        a URL or an AsyncEngine for those).
    :return: `queue` itself, for ``with bind(queue, url) as queue:``.
    """
    core = queue.core.rebound(engine)
    binds = [(maker, _engine_for(maker, core, engine)) for maker in sessionmakers]
    previous = [(maker, maker.kw.get("bind")) for maker, _ in binds]
    replaced, queue.core = queue.core, core
    try:
        for maker, target in binds:
            maker.configure(bind=target)
        yield queue
    finally:
        queue.core = replaced
        for maker, bound in previous:
            maker.configure(bind=bound)
        if isinstance(engine, str) or kinds.is_async_engine(engine):
            _dispose(core, engine)


def _engine_for(maker: Any, core: Any, given: Any) -> Any:
    """The engine of `core` that a session of `maker` needs, or a ConfigurationError."""
    if not callable(getattr(maker, "configure", None)) or not hasattr(maker, "kw"):
        raise ConfigurationError(
            f"bind() rebinds sessionmaker and async_sessionmaker objects, got {type(maker).__name__}"
        )
    if type(maker).__name__ != "async_sessionmaker":
        return given if isinstance(given, Engine) else core.engine
    asyncio_engine = core.executor.asyncio_engine()
    if asyncio_engine is None:
        raise ConfigurationError(
            f"an async_sessionmaker needs an AsyncEngine, and bind() was given {type(given).__name__}: "
            "pass the database URL (the queue then makes both kinds of engine) or an AsyncEngine"
        )
    return asyncio_engine


def _dispose(core: Any, given: Any) -> None:
    """Close the pools of the engines `core` made for this block (never one the test passed).
    The asyncio engine's pool is closed on a loop of its own when none runs here (a sync test),
    else dropped for the garbage collector (its connections belong to the test's loop)."""
    core.engine.dispose()
    asyncio_engine = core.executor.made_asyncio_engine() if isinstance(given, str) else None
    if asyncio_engine is None:
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(asyncio_engine.dispose())
    else:
        asyncio_engine.sync_engine.dispose(close=False)
