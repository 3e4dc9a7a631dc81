"""sqla_queue: a PostgreSQL job queue inside your SQLAlchemy application.

The public surface is what ``__all__`` lists; everything in underscored modules may move.

Each public name is imported from its module on first use (PEP 562): ``import sqla_queue``
costs almost nothing, and a process loads only what it touches. A worker or a script on a URL
never imports the ORM (``sq.Job``, ``sq.JobMixin``: `sqla_queue.models`) or the test helpers
(``sq.testing``); ``sq.__version__`` reads the installed distribution's metadata when asked.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from . import errors
from .errors import (
    ConfigurationError,
    DatabaseError,
    EnqueueConflictError,
    InvalidInputError,
    JobCancelledError,
    LostClaimError,
    NonRetryableError,
    PayloadError,
    PermissionDeniedError,
    PluginError,
    ResultError,
    Snooze,
    SqlaQueueError,
    UnknownTaskError,
    WaitTimeoutError,
)

if TYPE_CHECKING:
    from . import testing
    from ._tasks import Task
    from .core.schedules import Schedule
    from .hookspecs import hookimpl
    from .models import Job, JobMixin
    from .queue import Queue
    from .tables import metadata
    from .types import (
        DEFAULT_LEASE,
        BulkResult,
        ClaimedJob,
        HistoryPoint,
        JobContext,
        JobStatus,
        JobView,
        Outcome,
        QueueHealth,
        QueueState,
        QueueStats,
        WorkerSeen,
    )

    __version__: str

_TYPES = ("DEFAULT_LEASE", "BulkResult", "ClaimedJob", "HistoryPoint", "JobContext", "JobStatus", "JobView",
          "Outcome", "QueueHealth", "QueueState", "QueueStats", "WorkerSeen")

# Where each name that is imported on first use lives (relative to this package).
_LAZY = {
    "Queue": ".queue",
    "Task": "._tasks",
    "Schedule": ".core.schedules",
    "hookimpl": ".hookspecs",
    "Job": ".models",
    "JobMixin": ".models",
    "metadata": ".tables",
    **dict.fromkeys(_TYPES, ".types"),
}


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use and keep the name here (see the module's
    docs). ``sq.testing`` (`sqla_queue.testing`) is the helpers module itself."""
    if name == "testing":
        return import_module(f"{__name__}.testing")
    if name == "__version__":
        value: Any = _installed_version()
    elif name in _LAZY:
        value = getattr(import_module(_LAZY[name], __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "__version__", "testing"})


def _installed_version() -> str:
    """The installed distribution's version: pyproject.toml's, the one source of truth."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sqla-queue")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return "0+unknown"


__all__ = [
    "BulkResult",
    "ClaimedJob",
    "ConfigurationError",
    "DEFAULT_LEASE",
    "DatabaseError",
    "EnqueueConflictError",
    "HistoryPoint",
    "InvalidInputError",
    "Job",
    "JobCancelledError",
    "JobContext",
    "JobMixin",
    "JobStatus",
    "JobView",
    "LostClaimError",
    "NonRetryableError",
    "Outcome",
    "PayloadError",
    "PermissionDeniedError",
    "PluginError",
    "Queue",
    "QueueHealth",
    "QueueState",
    "QueueStats",
    "ResultError",
    "Schedule",
    "Snooze",
    "SqlaQueueError",
    "Task",
    "UnknownTaskError",
    "WaitTimeoutError",
    "WorkerSeen",
    "errors",
    "hookimpl",
    "metadata",
]
