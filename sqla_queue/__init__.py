"""sqla_queue: a PostgreSQL job queue inside your SQLAlchemy application.

The public surface is what ``__all__`` lists; everything in underscored modules may move.

``sq.Job`` and ``sq.JobMixin`` (`sqla_queue.models`, SQLAlchemy's ORM with them), the test
helpers (``sq.testing``) and ``sq.__version__`` (the installed distribution's metadata) are
imported on first use (PEP 562): a worker, the command line and an application that enqueues on
a URL use the Core job table (`sqla_queue.tables`) and never load the ORM. So are the types the
operator reads return (``sq.JobView``, ``sq.QueueStats``, ...: `sqla_queue.reports`), which a
worker never builds.
"""

from __future__ import annotations

from ._startup import pause_for_the_command_line

pause_for_the_command_line()  # before SQLAlchemy's import: the `sqla-queue` command's start-up

from importlib import import_module
from typing import TYPE_CHECKING, Any

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
from ._validate import json_value
from .hookspecs import hookimpl
from .queue import Queue
from .tables import metadata
from .types import DEFAULT_LEASE, ClaimedJob, JobContext, JobStatus, Outcome, QueueLimits, QueueState, Rate
from .workflow import BatchStatus, Earlier

if TYPE_CHECKING:
    from . import testing
    from .models import Job, JobMixin
    from .reports import BulkResult, HistoryPoint, JobView, QueueHealth, QueueStats, WorkerInfo, WorkerSeen

    __version__: str

# Where each name that is imported on first use lives (relative to this package).
_LAZY = {"Job": ".models", "JobMixin": ".models",
         **dict.fromkeys(["BulkResult", "HistoryPoint", "JobView", "QueueHealth", "QueueStats", "WorkerInfo",
                          "WorkerSeen"], ".reports")}


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
    "BatchStatus",
    "Earlier",
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
    "QueueLimits",
    "QueueState",
    "QueueStats",
    "Rate",
    "ResultError",
    "Schedule",
    "Snooze",
    "SqlaQueueError",
    "Task",
    "UnknownTaskError",
    "WaitTimeoutError",
    "WorkerInfo",
    "WorkerSeen",
    "errors",
    "hookimpl",
    "json_value",
    "metadata",
]
