"""The claim of a queue with limits (``<table>_limits``): caps on running jobs, per group key,
token-bucket rates and fair turns between keys, enforced by the statement that claims.

A queue without limits never runs this: its claim stays `claim_jobs` / the worker's round, the
same SQL and plan as before limits existed. A limited claim is a transaction of two statements
(`core.limits`), sent in one round trip with psycopg: `sql.limits.lock_limits_to_claim` locks the queue's
limits row, then the statement built here claims (after checking that the row still holds the
limits it was built for). Claims of one limited queue therefore take turns, and each one's snapshot (taken
when its statement starts, after the lock) sees everything the previous claims committed: a
count of running jobs in it is exact, so a cap is never overshot however many workers claim at
once. docs/explanation/limits.md has the whole argument and the cost.

The statement's parts, as CTEs:

* ``budget``: how many jobs this claim may take, ``:limit`` at most, less what the queue's
  ``:concurrency`` leaves (its running jobs counted now) and the whole tokens in its bucket
  (``tokens`` refilled at ``:per_second`` up to ``:burst`` since ``refilled_at``) plus the next
  ``:ahead`` seconds of them; a job paid with a token not yet due gets that moment as its
  ``locked_at`` and its ``start_after`` (`_claimed_in_start_order`).
* with group limits and not fair: first the queue's head (``queue_head``: its first ``4 ×
  :limit`` due jobs in claim order), each key's jobs in it kept while within the key's room;
  when that fills ``budget`` (the usual case on a queue of many keys) the rotation below is
  never run (its branch sits behind a one-time filter).
* with group limits (`grouped`) otherwise: the group keys of the queue's pending jobs, read as a loose
  index scan (one probe of ``pending_group_idx`` per key) starting after the key the last claim
  served (``:cursor``) and wrapping around, at most ``4 × :limit`` keys; per key a LATERAL read
  of its due jobs in claim order, at most what ``:group_concurrency`` (its running jobs
  counted) and its bucket in ``<table>_group_rates`` leave; and the jobs without a key among
  the queue's first ``4 × :limit`` due jobs. The claim takes ``budget`` of these: in claim
  order (the Queue's `ClaimOrder`), or with ``:fair`` round-robin (each key's first job, then
  each key's second...).
* ``due_jobs``: the chosen rows, locked ``FOR UPDATE SKIP LOCKED`` (they are read unlocked
  first: the claims of this queue are serialized, so only a job claimed by id or an operator's
  write can take one meanwhile, and the lock's recheck of ``status = 'pending'`` drops it).
* the UPDATE of the claim, the buckets' and the rotation's writes, and ``throttled``: whether
  due jobs were left behind while the claim took fewer than ``:limit`` (the health signal,
  counted in ``<table>_counters`` by the statement itself).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Integer,
    Interval,
    Table,
    Text,
    and_,
    bindparam,
    case,
    cast,
    exists,
    func,
    literal,
    null,
    or_,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.sql import Executable, visitors

from ...tables import counters_table, group_rates_table, limits_table
from .. import counters as counter_sql
from ..limits import LIMIT_COLUMNS
from ...types import JobStatus
from .._predicates import status_is
from . import claimed_update, registered_task
from .order import DEFAULT_ORDER, ClaimOrder

KEYS_PER_JOB = 4
"""A grouped claim under a per-key cap (``group_concurrency``, ``group_rate``) visits at most this
many keys (and jobs without a key) per job it may take: capped keys may supply none. A claim that
is only fair visits one key per job (each key in the index has pending jobs)."""


def claim_limited_jobs(table: Table, *, grouped: bool, fair: bool = False,
                       order: ClaimOrder = DEFAULT_ORDER) -> Executable:
    """Claim up to ``:limit`` due jobs of ``:queue`` within its limits (the module's docs), for
    ``:worker_id`` under ``:token`` and ``:lease``; ``:tasks`` as in `claim_served_jobs`.

    The limits the caller built it for (their columns as parameters ``:known_<column>``, for
    each of `LIMIT_COLUMNS`) must still be the queue's row: if the row changed or is gone, the claim
    takes nothing and says ``stale`` (the caller reads the limits again). A claim the limits
    held back adds one ``throttled`` event to the queue's counter in the same statement.

    Returns the claimed rows (`claimed_update`'s columns and ``group_key``) with ``throttled``
    and ``stale`` on each, or a single row of NULLs but those two when nothing was claimed.
    `grouped`: the queue has a group limit or is fair (the key-by-key read); `fair`:
    round-robin order; `order`: the Queue's claim order, within each key and between them.
    """
    limits = limits_table(table)
    budget = case((limits_unchanged(limits), _budget(table, limits)), else_=0)
    chosen = _chosen_grouped(table, budget, fair, order) if grouped else _chosen_plain(table, budget, order)
    due = (select(table.c.id)
           .where(table.c.id.in_(select(chosen.c.id)), status_is(table, JobStatus.PENDING))
           .with_for_update(skip_locked=True)
           .cte("due_jobs"))
    claimed = _claimed_in_start_order(table, limits, due)
    writes = [_rate_bucket(limits, claimed, chosen if grouped else None)]
    if grouped:
        writes.append(_group_buckets(table, claimed))
    summary = select(_throttled(table, claimed, order).label("throttled"), (~limits_unchanged(limits)).label("stale")).cte("summary")
    writes.append(_count_throttled(table, summary))
    # The buckets' writes are CTEs nothing reads: PostgreSQL runs a data-modifying WITH query
    # to completion whether or not it is read, and add_cte makes SQLAlchemy render them.
    return (select(*claimed.c, summary.c.throttled, summary.c.stale)
            .select_from(summary.outerjoin(claimed, true()))
            .add_cte(*writes))


def due_conditions(table: Table) -> list:
    return [
        table.c.queue_name == bindparam("queue", type_=Text),
        status_is(table, JobStatus.PENDING),
        table.c.run_at <= func.clock_timestamp(),
        table.c.attempts < table.c.max_attempts,
        registered_task(table),
    ]


def _order_columns(table: Table, order: ClaimOrder) -> list:
    """``id`` and the job columns `order` sorts by: what the subqueries below carry so that
    their rows can be put in that order again."""
    used = [element for expression in order.order_by(table) for element in visitors.iterate(expression)
            if isinstance(element, Column) and element.table is table]
    return list({column.key: column for column in [table.c.id, *used]}.values())


def limits_unchanged(limits: Table):
    """The queue's limits row is the one the statement was given (``:known_<column>``): it is
    read under the claim's lock, so the limits cannot change before the commit."""
    same = [limits.c[name].is_not_distinct_from(bindparam(f"known_{name}", type_=limits.c[name].type))
            for name in LIMIT_COLUMNS]
    return exists().where(limits.c.queue_name == bindparam("queue", type_=Text), *same)


def _cursor(limits: Table):
    """The key the last claim of ``:queue`` served: the rotation starts after it."""
    return (select(limits.c.last_group_key).where(limits.c.queue_name == bindparam("queue", type_=Text))
            .scalar_subquery())


def _count_throttled(table: Table, summary):
    """One ``throttled`` event on ``:queue``'s counter for this minute, when the claim was held back."""
    rows = (select(counter_sql.minute(), bindparam("queue", type_=Text), literal(counter_sql.THROTTLED),
                   literal(1, BigInteger))
            .where(summary.c.throttled))
    return counter_sql.upsert(counters_table(table), rows).returning(literal(1)).cte("throttled_count")


def _number(name: str):
    """A float parameter, cast: the driver sends NULL untyped, and ``$n IS NULL`` needs a type."""
    return cast(bindparam(name, type_=Float), Float)


def claim_limit():
    return bindparam("limit", type_=Integer)


def _running(table: Table, group_key=None, keys=None) -> object:
    """Running jobs of ``:queue`` (of `group_key`) now: in the statement's snapshot, taken
    after the limits lock, so every earlier claim is counted. An alias of its own, so the
    count never correlates to the enclosing read of the job table."""
    running = table.alias("running_jobs")
    extra = [] if group_key is None else [running.c.group_key == group_key]
    return (select(func.count()).select_from(running)
            .where(running.c.queue_name == bindparam("queue", type_=Text), status_is(running, JobStatus.RUNNING),
                   *extra)
            .correlate(*([] if keys is None else [keys]))
            .scalar_subquery())


def _tokens(tokens, refilled_at, per_second, burst):
    """A token bucket's content now: `tokens` at `refilled_at` (NULL: a full bucket) plus
    `per_second` since, at most `burst`."""
    # Never below zero: for a full bucket (`refilled_at` NULL) the two clock readings are taken one
    # after the other, and a negative difference of microseconds would floor 2 tokens down to 1.
    elapsed = func.greatest(0, func.extract("epoch", func.clock_timestamp()
                                            - func.coalesce(refilled_at, func.clock_timestamp())))
    return func.least(burst, func.coalesce(tokens, burst) + per_second * elapsed)


def _queue_tokens(limits: Table):
    return _tokens(limits.c.tokens, limits.c.refilled_at, _number("per_second"),
                   _number("burst"))


def _budget(table: Table, limits: Table):
    """How many jobs this claim may take (0 or more)."""
    limit = claim_limit()
    left = _left(bindparam("max_running", type_=Integer), _running(table), limit)
    tokens = select(func.floor(_queue_tokens(limits) + _tokens_ahead())).where(
        limits.c.queue_name == bindparam("queue", type_=Text)).scalar_subquery()
    return func.greatest(0, func.least(limit, left, func.coalesce(cast(tokens, Integer), limit)))


def _tokens_ahead():
    """Tokens of a rate a claim may take before they are in the bucket: ``:per_second`` times
    ``:ahead`` seconds (0 without a rate). The jobs they pay for start when their token is due
    (`_claimed_in_start_order`), so a worker that claims late loses none of the rate's starts."""
    return func.coalesce(_number("per_second") * _number("ahead"), 0)


def _claimed_in_start_order(table: Table, limits: Table, due):
    """The claim's UPDATE of the `due` rows, each with the moment it may start: at once while
    the queue's bucket holds its token, else when the bucket refills to it (``start_after``
    seconds from now, also the delay added to ``locked_at`` and the lease). Jobs take the
    tokens in id order.

    The claim's moment and each row's delay are computed once, in ``start_order``, and every
    column that holds them reads them from there: evaluated once per use, the bucket (which
    grows with the clock) would give the worker a shorter wait than the ``locked_at`` stored."""
    per_second = _number("per_second")
    in_bucket = (select(_queue_tokens(limits)).where(limits.c.queue_name == bindparam("queue", type_=Text))
                 .scalar_subquery())
    turn = func.row_number().over(order_by=due.c.id)
    start_after = case((per_second.is_(None), literal(0.0)),
                       else_=func.greatest(0.0, (turn - in_bucket) / per_second))
    claimed_at = select(func.clock_timestamp()).scalar_subquery()
    turns = select(due.c.id, cast(start_after, Float).label("start_after"),
                   claimed_at.label("claimed_at")).cte("start_order")
    starts_at = turns.c.claimed_at + func.make_interval(0, 0, 0, 0, 0, 0, turns.c.start_after)
    return (claimed_update(table, table.c.id == turns.c.id,
                           locked_at=starts_at,
                           lease_expires_at=starts_at + bindparam("lease", type_=Interval))
            .returning(table.c.group_key, turns.c.start_after).cte("claimed"))


def _left(cap, running, otherwise):
    """`cap` less `running`, or `otherwise` without a cap: a CASE, so that the count of running
    jobs is not made at all for a queue (a key) without one."""
    return case((cap.is_(None), otherwise), else_=cap - running)


def _chosen_plain(table: Table, budget, order: ClaimOrder):
    """The first ``budget`` due jobs in claim order."""
    return (select(table.c.id).where(*due_conditions(table)).order_by(*order.order_by(table)).limit(budget)
            .cte("chosen"))


def _chosen_grouped(table: Table, budget, fair: bool, order: ClaimOrder):
    """``budget`` jobs: from the queue's head when it holds that many within the caps (not for a
    fair queue), else from the next keys in rotation and the jobs without a key (module docs)."""
    head = _queue_head(table, order)
    rotation = _chosen_in_rotation(table, head, budget, fair, order)
    if fair:
        return rotation.cte("chosen")
    rotation = rotation.subquery("in_rotation")
    from_head = _chosen_from_head(table, head, budget, order)
    head_full = select(func.count()).select_from(from_head).scalar_subquery() >= budget
    # Two branches of which one runs: the rotation's subplan is behind a one-time filter, so a
    # claim that the head fills never walks the keys.
    return union_all(
        select(from_head.c.id, from_head.c.seq).where(head_full),
        select(rotation.c.id, rotation.c.seq).where(~head_full),
    ).cte("chosen")


def _queue_head(table: Table, order: ClaimOrder):
    """The queue's first ``4 × :limit`` due jobs in claim order, with their keys."""
    return (select(*_order_columns(table, order), table.c.group_key)
            .where(*due_conditions(table)).order_by(*order.order_by(table)).limit(claim_limit() * KEYS_PER_JOB)
            .cte("queue_head"))


def _chosen_from_head(table: Table, head, budget, order: ClaimOrder):
    """The first ``budget`` jobs of `head` in claim order that their keys' caps allow (each key's
    jobs in the head numbered in claim order, kept while within the key's room)."""
    names = [column.key for column in _order_columns(table, order)]
    ranked = select(*(head.c[name] for name in names), head.c.group_key,
                    func.row_number().over(partition_by=head.c.group_key,
                                           order_by=order.order_by(head)).label("key_rank")).subquery("head_ranked")
    room = _key_room(table, ranked.c.group_key, ranked)
    allowed = (select(*(ranked.c[name] for name in names))
               .where(or_(ranked.c.group_key.is_(None), ranked.c.key_rank <= room)).subquery("head_allowed"))
    return (select(allowed.c.id, literal(0).label("seq")).order_by(*order.order_by(allowed)).limit(budget)
            .cte("from_head"))


def _chosen_in_rotation(table: Table, head, budget, fair: bool, order: ClaimOrder):
    """``budget`` jobs from the next keys in rotation and the jobs without a key in `head`."""
    keys = _keys_in_rotation(table)
    per_key = _per_key(table, keys, order)
    ungrouped = _ungrouped(table, head, order)
    names = [column.key for column in _order_columns(table, order)]
    candidates = union_all(
        select(*(per_key.c[name] for name in names), per_key.c.turn, keys.c.seq)
        .select_from(keys.join(per_key, true())),
        select(*(ungrouped.c[name] for name in names), ungrouped.c.turn, literal(0).label("seq")),
    ).subquery("candidates")
    in_order = order.order_by(candidates)  # type: ignore[arg-type]  (any FromClause with the columns)
    ranked = [candidates.c.turn, candidates.c.seq, *in_order] if fair else in_order
    return select(candidates.c.id, candidates.c.seq).order_by(*ranked).limit(budget)


def _next_key(table: Table, after):
    """The smallest group key of ``:queue``'s pending jobs above `after`: one probe of the
    pending-group index (a loose index scan is a chain of these)."""
    jobs = table.alias("key_probe")
    return (select(jobs.c.group_key)
            .where(jobs.c.queue_name == bindparam("queue", type_=Text), status_is(jobs, JobStatus.PENDING),
                   jobs.c.group_key.is_not(None), jobs.c.group_key > after)
            .order_by(jobs.c.group_key).limit(1).scalar_subquery())


def _keys_in_rotation(table: Table):
    """Up to ``4 × :limit`` keys with pending jobs: those after ``:cursor``, then from the first
    key up to ``:cursor``, each with its place in that rotation (``seq``)."""
    most = claim_limit() * _keys_per_job()
    cursor = _cursor(limits_table(table))
    walks = []
    wanted = most  # the wrapped walk only looks for the keys the first one did not find
    for name, start, offset in (("after_cursor", func.coalesce(cursor, ""), 0), ("to_cursor", literal(""), most)):
        first = select(_next_key(table, start).label("group_key"), literal(1).label("n"))
        if name == "to_cursor":
            first = first.where(wanted > 0)
        walk = first.cte(name, recursive=True)
        walk = walk.union_all(select(_next_key(table, walk.c.group_key), walk.c.n + 1)
                              .where(walk.c.group_key.is_not(None), walk.c.n < wanted))
        wrapped = [walk.c.group_key <= cursor] if name == "to_cursor" else []
        walks.append(select(walk.c.group_key, (walk.c.n + offset).label("seq"))
                     .where(walk.c.group_key.is_not(None), *wrapped))
        found = select(func.count()).select_from(walk).where(walk.c.group_key.is_not(None)).scalar_subquery()
        wanted = most - found
    both = union_all(*walks).subquery("rotation")
    return select(both.c.group_key, both.c.seq).order_by(both.c.seq).limit(most).subquery("group_keys")


def _per_key(table: Table, keys, order: ClaimOrder):
    """Per key of `keys` (LATERAL): its due jobs in claim order, as many as its
    ``:group_concurrency`` (running jobs counted now) and its bucket allow, numbered (``turn``)."""
    cap = _key_room(table, keys.c.group_key, keys)
    jobs = (select(*_order_columns(table, order))
            .where(*due_conditions(table), table.c.group_key == keys.c.group_key)
            .order_by(*order.order_by(table)).limit(cap)
            .correlate(keys).subquery("key_jobs"))
    numbered = select(*jobs.c, func.row_number().over(order_by=order.order_by(jobs)).label("turn")).correlate(keys)
    return numbered.lateral("per_key")


def _key_room(table: Table, group_key, keys):
    """How many more jobs of `group_key` (a column of `keys`) may start now: what its
    ``:group_concurrency`` leaves (its running jobs counted now) and its bucket's whole tokens,
    at most ``:limit``."""
    group_rates = group_rates_table(table)
    limit = claim_limit()
    running = _running(table, group_key, keys)
    left = _left(bindparam("max_running_per_key", type_=Integer), running, limit)
    bucket = (select(func.floor(_tokens(group_rates.c.tokens, group_rates.c.refilled_at,
                                        _number("group_per_second"),
                                        _number("group_burst"))))
              .where(group_rates.c.queue_name == bindparam("queue", type_=Text),
                     group_rates.c.group_key == group_key)
              .correlate(keys).scalar_subquery())
    tokens = case((_number("group_per_second").is_(None), limit),
                  else_=cast(func.coalesce(bucket, func.floor(_number("group_burst"))), Integer))
    return func.greatest(0, func.least(limit, left, tokens))


def _keys_per_job():
    capped = or_(bindparam("max_running_per_key", type_=Integer).is_not(None),
                 _number("group_per_second").is_not(None))
    return case((capped, KEYS_PER_JOB), else_=1)


def _ungrouped(table: Table, head, order: ClaimOrder):
    """Jobs without a key in `head` (the queue's first ``4 × :limit`` due jobs in claim order),
    numbered (``turn``) as one more key. Bounded: a queue with group limits whose head is all
    grouped jobs does not walk its whole backlog to find one without a key."""
    return (select(*(head.c[column.key] for column in _order_columns(table, order)),
                   func.row_number().over(order_by=order.order_by(head)).label("turn"))
            .where(head.c.group_key.is_(None)).subquery("ungrouped"))


def _rate_bucket(limits: Table, claimed, chosen):
    """The queue's row after the claim: its bucket less the jobs claimed (when it has a rate),
    and with `chosen` (a grouped claim) the key of the last claimed job in rotation, where the
    next claim starts."""
    claimed_count = select(func.count()).select_from(claimed).scalar_subquery()
    per_second = _number("per_second")
    values = {
        "tokens": case((per_second.is_(None), null()), else_=_queue_tokens(limits) - claimed_count),
        "refilled_at": case((per_second.is_(None), null()), else_=func.clock_timestamp()),
    }
    if chosen is not None:
        keyed = claimed.join(chosen, chosen.c.id == claimed.c.id)
        last = (select(claimed.c.group_key).select_from(keyed).where(chosen.c.seq > 0)
                .order_by(chosen.c.seq.desc()).limit(1).scalar_subquery())
        values["last_group_key"] = func.coalesce(last, limits.c.last_group_key)
    return (update(limits).where(limits.c.queue_name == bindparam("queue", type_=Text)).values(values)
            .returning(limits.c.queue_name).cte("queue_bucket"))


def _group_buckets(table: Table, claimed):
    """Each claimed key's bucket less its jobs claimed (when the queue has a ``group_rate``)."""
    group_rates = group_rates_table(table)
    per_second = _number("group_per_second")
    burst = _number("group_burst")
    old = group_rates.alias("old_bucket")
    now_tokens = _tokens(old.c.tokens, old.c.refilled_at, per_second, burst)
    rows = (select(bindparam("queue", type_=Text), claimed.c.group_key,
                   func.coalesce(now_tokens, burst) - func.count(), func.clock_timestamp())
            .select_from(claimed.outerjoin(old, and_(old.c.queue_name == bindparam("queue", type_=Text),
                                                     old.c.group_key == claimed.c.group_key)))
            .where(claimed.c.group_key.is_not(None), per_second.is_not(None))
            .group_by(claimed.c.group_key, old.c.tokens, old.c.refilled_at))
    statement = insert(group_rates).from_select(["queue_name", "group_key", "tokens", "refilled_at"], rows)
    return statement.on_conflict_do_update(
        index_elements=[group_rates.c.queue_name, group_rates.c.group_key],
        set_={"tokens": statement.excluded.tokens, "refilled_at": statement.excluded.refilled_at},
    ).returning(group_rates.c.group_key).cte("key_buckets")


def _throttled(table: Table, claimed, order: ClaimOrder):
    """The claim took fewer than ``:limit`` jobs while a due job of the queue it did not claim
    was left (the statement's snapshot still shows the claimed ones pending)."""
    claimed_count = select(func.count()).select_from(claimed).scalar_subquery()
    jobs = table.alias("left_behind")
    # A scalar subquery in claim order, not EXISTS (whose ORDER BY and LIMIT PostgreSQL drops):
    # the pending index is read from its head, where the claimed rows and then the first one
    # left behind are, instead of a scan looking for any such row.
    left_behind = (select(jobs.c.id).where(*due_conditions(jobs), jobs.c.id.not_in(select(claimed.c.id)))
                   .order_by(*order.order_by(jobs)).limit(1).scalar_subquery().is_not(None))
    return and_(claimed_count < claim_limit(), left_behind)

