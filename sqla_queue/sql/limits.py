"""Flow control's own statements: store, clear and read a queue's limits (``<table>_limits``),
and the lock every claim of a limited queue takes first (`lock_limits`).

The claim itself, which enforces them, is `sql.claim.limited`.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Integer,
    Interval,
    Table,
    Text,
    bindparam,
    column,
    delete,
    func,
    literal,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.sql import Executable

from ..types import JobStatus
from ._predicates import status_is
from .enqueue import fair_turn

LIMIT_COLUMNS = ("concurrency", "group_concurrency", "rate", "rate_period", "group_rate", "group_rate_period", "fair")
"""What `set_limits` writes, each from a bind parameter of the same name."""

_TYPES = {"rate_period": Interval, "group_rate_period": Interval, "fair": Boolean}


def set_limits(limits: Table) -> Executable:
    """Store queue ``:queue``'s limits (every column of `LIMIT_COLUMNS`; NULL: none), replacing
    what it had. The rate bucket starts full again and the key rotation from the first key."""
    values = {name: bindparam(name, type_=_TYPES.get(name, Integer)) for name in LIMIT_COLUMNS}
    statement = insert(limits).values(queue_name=bindparam("queue", type_=Text), **values)
    fresh = {**{name: statement.excluded[name] for name in LIMIT_COLUMNS},
             "tokens": None, "refilled_at": None, "last_group_key": None, "updated_at": func.now()}
    return statement.on_conflict_do_update(index_elements=[limits.c.queue_name], set_=fresh)


def ensure_limits(limits: Table) -> Executable:
    """A row for queue ``:queue`` with no limits, unless it has one: what `set_limits`' caller
    then locks and reads (`lock_limits`), so changes from two callers at once are serialized
    even when the queue had no row. It is replaced or deleted in the same transaction."""
    return insert(limits).values(queue_name=bindparam("queue", type_=Text)).on_conflict_do_nothing(
        index_elements=[limits.c.queue_name])


def clear_limits(limits: Table) -> Executable:
    """Remove queue ``:queue``'s limits: its claims are the unlimited claim again."""
    return delete(limits).where(limits.c.queue_name == bindparam("queue", type_=Text))


def clear_group_rates(group_rates: Table) -> Executable:
    """Forget queue ``:queue``'s per-key buckets (its limits were replaced or cleared)."""
    return delete(group_rates).where(group_rates.c.queue_name == bindparam("queue", type_=Text))


def all_limits(limits: Table) -> Executable:
    """Every limited queue's row, by name: `Queue.limits`, the queues list, stats."""
    return select(limits).order_by(limits.c.queue_name)


def lock_limits(limits: Table) -> Executable:
    """Queue ``:queue``'s limits row, locked ``FOR UPDATE`` until the claim's transaction ends.

    This is what makes a limit exact across workers. Claims of one limited queue take turns
    here, and the claim statement that follows in the same transaction starts after the lock
    is granted: under READ COMMITTED it then takes a new snapshot, which sees every claim the
    previous holder committed. A count of running jobs made in the same statement as the lock
    would not (its snapshot is taken before the statement waits for the lock).
    """
    return select(limits).where(limits.c.queue_name == bindparam("queue", type_=Text)).with_for_update()


def lock_limits_to_claim(limits: Table) -> Executable:
    """`lock_limits` for a claim: the same row lock, and the claim's commit does not wait for
    its WAL flush (``synchronous_commit`` off for this transaction alone).

    The lock is held until the commit, so a flush waited for there is a flush every other claim
    of the queue waits for too: claims of one limited queue would take turns at the disk's
    pace. The commit is visible to the next claim at once either way, so no limit can be
    overshot; what a crash of PostgreSQL (not of a worker) can lose is the last fraction of a
    second of claims, whose jobs are then pending again and run again, as a lease recovery
    would run them. Completions, retries and every other outcome commit durably, in
    transactions of their own (docs/explanation/limits.md).
    """
    return (select(limits, func.set_config("synchronous_commit", "off", true()).label("synchronous_commit"))
            .where(limits.c.queue_name == bindparam("queue", type_=Text)).with_for_update(of=limits))


def turn_bases(table: Table) -> Executable:
    """Each group key (NULL included) of queue ``:queue``'s pending and waiting jobs without a
    turn, with the turn its first such job gets (`sql.enqueue.fair_turn`): read by `set_limits`,
    in its transaction and after writing ``fair``, when a queue becomes fair. A statement of its
    own, made before `tag_pending_turns` writes: reading a key's last turn from the index while
    the same statement adds turns to it would step over every new entry, once per row."""
    jobs = table.alias("untagged")
    keys = (select(jobs.c.group_key).distinct()
            .where(*_untagged(jobs)).subquery("untagged_keys"))
    return select(keys.c.group_key, fair_turn(table, bindparam("queue", type_=Text), keys.c.group_key,
                                              literal(1)).label("base"))


def tag_pending_turns(table: Table) -> Executable:
    """Give those jobs their turns: per key, ``:bases`` (for ``:keys``, from `turn_bases`) on,
    in id (enqueue) order."""
    jobs = table.alias("untagged")
    numbered = (select(jobs.c.id, jobs.c.group_key,
                       func.row_number().over(partition_by=jobs.c.group_key, order_by=jobs.c.id).label("rank"))
                .where(*_untagged(jobs)).subquery("numbered"))
    bases = (func.unnest(bindparam("keys", type_=ARRAY(Text)), bindparam("bases", type_=ARRAY(BigInteger)))
             .table_valued(column("group_key", Text), column("base", BigInteger)).render_derived().alias("bases"))
    return (update(table)
            .where(table.c.id == numbered.c.id, numbered.c.group_key.is_not_distinct_from(bases.c.group_key))
            .values(fair_tag=bases.c.base + numbered.c.rank - 1))


def _untagged(jobs) -> list:
    return [jobs.c.queue_name == bindparam("queue", type_=Text),
            status_is(jobs, JobStatus.PENDING, JobStatus.WAITING), jobs.c.fair_tag.is_(None)]
