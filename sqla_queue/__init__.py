"""sqla_queue: a PostgreSQL job queue inside your SQLAlchemy application.

The public surface is what ``__all__`` lists; everything in underscored modules may move.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from . import errors
from ._tasks import Task
from .core.schedules import Schedule
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
from .hookspecs import hookimpl
from .models import Job, JobMixin, metadata
from .queue import Queue
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

try:
    __version__ = version("sqla-queue")
    """The installed distribution's version: pyproject.toml's, the one source of truth."""
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    """``sq.testing`` (the helpers for tests: `sqla_queue.testing`) is imported on first use,
    never by ``import sqla_queue``: an application's import does not load its test helpers."""
    if name == "testing":
        return import_module(f"{__name__}.testing")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
