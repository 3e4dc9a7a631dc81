"""The job states, as one table.

Every list of states the package uses is read from `STATES`: the CHECK constraint and the
finished-at indexes of the job table (`tables`), the statuses that hold an idempotency key
(`ACTIVE`), the terminal ones that retention prunes and stats count by their finish time
(`FINISHED`, each with its ``finished_at`` column), and the statements built from those. Adding
a state is a member of `JobStatus`, its row here, a migration for the constraint (and the
column and index a terminal state brings), and the SQL of the transitions into and out of it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class JobStatus(str, enum.Enum):
    """The states of a job (see docs/explanation/state-machine.md)."""

    WAITING = "waiting"
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class State:
    """What the package needs to know of one state.

    :param status: the state.
    :param active: a job in it holds its idempotency key (the dedupe window), and counts as
        work still to do (stats, `cancel_jobs`, the waiter).
    :param finished_at: for a terminal state, the column that records when the job entered it:
        retention prunes by it, stats and the recent-workers view read its partial index.
    """

    status: JobStatus
    active: bool = False
    finished_at: str | None = None

    @property
    def terminal(self) -> bool:
        return self.finished_at is not None

    @property
    def value(self) -> str:
        return self.status.value


STATES: tuple[State, ...] = (
    # Waiting for its dependencies (revision sqlaq_0012): active, so it holds its idempotency
    # key and counts as work to do, but no claim reads it; it turns pending in the statement
    # that finishes its last dependency (`sql.dependencies`).
    State(JobStatus.WAITING, active=True),
    State(JobStatus.PENDING, active=True),
    State(JobStatus.RUNNING, active=True),
    State(JobStatus.COMPLETED, finished_at="completed_at"),
    State(JobStatus.FAILED, finished_at="failed_at"),
    State(JobStatus.CANCELLED, finished_at="cancelled_at"),
)

ACTIVE: tuple[JobStatus, ...] = tuple(s.status for s in STATES if s.active)
"""States in which an idempotency key is held (the dedupe window)."""

FINISHED: tuple[State, ...] = tuple(s for s in STATES if s.terminal)
"""Terminal states: kept until pruned, never left again except by an operator's retry."""

FINISHED_STATUSES: tuple[JobStatus, ...] = tuple(s.status for s in FINISHED)


def state_of(status: JobStatus | str) -> State:
    """The row of `status` (a `JobStatus` or its value)."""
    for state in STATES:
        if state.status == status:
            return state
    raise KeyError(status)


def check_constraint_sql(states: tuple[State, ...] = STATES) -> str:
    """The job table's CHECK on ``status``: exactly the states of `states`."""
    return "status IN ({})".format(", ".join(f"'{state.value}'" for state in states))


def active_predicate_sql(states: tuple[State, ...] = STATES) -> str:
    """``status IN (...)`` of the active (dedupe) states."""
    return "status IN ({})".format(", ".join(f"'{state.value}'" for state in states if state.active))


def active_key_predicate_sql(states: tuple[State, ...] = STATES) -> str:
    """The active-key index's predicate, as the job table declares it: a key, in an active state
    (a NULL never conflicts, so keyless jobs stay out of the index)."""
    return f"idempotency_key IS NOT NULL AND {active_predicate_sql(states)}"
