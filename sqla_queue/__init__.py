"""sqla_queue: a PostgreSQL job queue inside your SQLAlchemy application.

The public surface is what ``__all__`` lists; everything in underscored modules may move.
"""

from . import errors
from ._tasks import Task
from .errors import (
    ConfigurationError,
    DatabaseError,
    EnqueueConflictError,
    InvalidInputError,
    NonRetryableError,
    PayloadError,
    PluginError,
    SqlaQueueError,
    UnknownTaskError,
)
from .hookspecs import hookimpl
from .models import Job, JobMixin, metadata
from .queue import Queue
from .types import DEFAULT_LEASE
from .types import (
    ClaimedJob,
    JobContext,
    JobStatus,
    JobView,
    Outcome,
    QueueHealth,
    QueueStats,
)

__all__ = [
    "ClaimedJob",
    "ConfigurationError",
    "DEFAULT_LEASE",
    "DatabaseError",
    "EnqueueConflictError",
    "InvalidInputError",
    "Job",
    "JobContext",
    "JobMixin",
    "JobStatus",
    "JobView",
    "NonRetryableError",
    "Outcome",
    "PayloadError",
    "PluginError",
    "Queue",
    "QueueHealth",
    "QueueStats",
    "SqlaQueueError",
    "Task",
    "UnknownTaskError",
    "errors",
    "hookimpl",
    "metadata",
]
