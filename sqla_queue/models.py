"""The queue table as SQLAlchemy declarative models.

`JobMixin` carries every column, CHECK constraint and index, so a host application can declare
its own job table on its own ``DeclarativeBase``; `Job` is the default table mapped. Both are
built from the Core definitions in `sqla_queue.tables`, and `Job.__table__` is that module's
`tables.jobs` itself: the queue, its worker and the command line use the Core table and never
import this module (nor ``sqlalchemy.orm``), which ``sq.Job`` and ``sq.JobMixin`` load on
first use. The packaged Alembic revisions create exactly this schema (a test compares them).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Table
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column

from . import tables
from .tables import (
    NAMING_CONVENTION,
    SAMPLE_COUNTS,
    companion_tables,
    counters_table,
    job_table_of,
    metadata,
    queues_table,
    samples_table,
    schedules_table,
    workers_table,
)

__all__ = [
    "NAMING_CONVENTION", "SAMPLE_COUNTS", "Base", "Job", "JobMixin", "companion_tables", "counters_table",
    "job_table_of", "metadata", "queues_table", "samples_table", "schedules_table",
    "workers_table",
]


class JobMixin:
    """Every queue column, constraint and index; mix into a class on any DeclarativeBase.

    Index and constraint names derive from ``__tablename__``, so two job tables in one database
    do not collide. Mapping a class declares its companion tables too (counters, queues,
    schedules, samples, workers: `tables.companion_tables`), so ``create_all`` and autogenerate see them.
    The columns are `tables.job_columns`' (what each holds is said there); the annotations
    below are their Python types.
    """

    id: Mapped[int]
    queue_name: Mapped[str]
    task: Mapped[str]
    payload: Mapped[dict[str, Any]]
    status: Mapped[str]
    run_at: Mapped[datetime]
    attempts: Mapped[int]
    max_attempts: Mapped[int]
    locked_at: Mapped[datetime | None]
    locked_by: Mapped[str | None]
    lease_expires_at: Mapped[datetime | None]
    claim_token: Mapped[str | None]
    completed_at: Mapped[datetime | None]
    failed_at: Mapped[datetime | None]
    last_error: Mapped[str | None]
    last_traceback: Mapped[str | None]
    idempotency_key: Mapped[str | None]
    priority: Mapped[int]
    snoozes: Mapped[int]
    scheduled_at: Mapped[datetime | None]
    cancel_requested_at: Mapped[datetime | None]
    cancelled_at: Mapped[datetime | None]
    result: Mapped[Any | None]
    watched: Mapped[bool]
    meta: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)  # DeclarativeBase maps the class here
        table = cls.__dict__.get("__table__")
        if isinstance(table, Table):
            companion_tables(table)

    @declared_attr.directive
    def __table_args__(cls) -> tuple[Any, ...]:
        return tables.job_table_args(cls.__tablename__)  # type: ignore[attr-defined]


# One definition for the Core table and the mixin: the mapped columns are made from the same
# arguments, in the same order (a test checks that a class on the mixin gets the Core table).
for _name, (_args, _options) in tables.job_columns().items():
    setattr(JobMixin, _name, mapped_column(*_args, **_options))
del _name, _args, _options


class Base(DeclarativeBase):
    metadata = metadata


class Job(JobMixin, Base):
    """The default job table, ``sqla_queue_jobs``: mapped onto `tables.jobs`, the very Table
    object the queue uses."""

    __tablename__ = tables.DEFAULT_JOB_TABLE
    __table__ = tables.jobs
