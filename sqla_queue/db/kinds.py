"""What kind of SQLAlchemy object a caller gave, without importing SQLAlchemy's ORM or its
asyncio extension to find out.

An object can only be an instance of a class whose module is loaded: a `Session` exists only
once ``sqlalchemy.orm`` is imported. So these checks look the classes up in ``sys.modules`` and
a process that never imported those modules (a worker, a script enqueueing on a URL) never
pays for them: importing ``sqlalchemy.ext.asyncio`` (and with it the ORM) took a sixth of a
worker's start-up.
"""

from __future__ import annotations

import sys
from typing import Any

_ORM = "sqlalchemy.orm"
_ASYNCIO = "sqlalchemy.ext.asyncio"


def _loaded(module: str, *names: str) -> tuple[type, ...]:
    """The classes `names` of `module` if it is imported (fully: a module still importing may
    lack them), else none."""
    found = sys.modules.get(module)
    if found is None:
        return ()
    return tuple(cls for cls in (getattr(found, name, None) for name in names) if cls is not None)


def is_session(obj: Any) -> bool:
    """A synchronous ORM ``Session`` or ``scoped_session`` (Flask-SQLAlchemy's ``db.session``)."""
    return isinstance(obj, _loaded(_ORM, "Session", "scoped_session"))


def is_async_session(obj: Any) -> bool:
    """An ``AsyncSession`` or ``async_scoped_session``."""
    return isinstance(obj, _loaded(_ASYNCIO, "AsyncSession", "async_scoped_session"))


def is_async_scoped_session(obj: Any) -> bool:
    return isinstance(obj, _loaded(_ASYNCIO, "async_scoped_session"))


def is_async_connection(obj: Any) -> bool:
    return isinstance(obj, _loaded(_ASYNCIO, "AsyncConnection"))


def is_async_engine(obj: Any) -> bool:
    return isinstance(obj, _loaded(_ASYNCIO, "AsyncEngine"))
