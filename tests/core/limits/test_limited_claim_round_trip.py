"""The limited claim's cost and its guard: one round trip (lock, claim and commit sent together),
a claim built for limits that changed meanwhile takes nothing and is made again under the new
ones, and `set_limits` from two callers at once keeps both changes. Real PostgreSQL; the round
trips are counted in libpq's own trace of what the connection sent."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import event, text
from waiting import wait_until

import sqla_queue as sq
from sqla_queue.core import limits as core_limits

pytestmark = pytest.mark.slow


@pytest.fixture
def tenants(own_database):
    _url, engine = own_database
    queue = sq.Queue(engine, load_entrypoints=False)

    @queue.task(queue="tenants")
    def work(payload, ctx):
        return None

    return queue, engine


def traced(engine, path):
    """Every new connection of `engine` writes libpq's trace of its messages to `path`."""
    from psycopg import pq

    out = open(path, "w")  # noqa: SIM115 - open for the engine's life, closed by the test

    @event.listens_for(engine, "connect")
    def trace(dbapi_connection, _record):
        dbapi_connection.pgconn.trace(out.fileno())
        dbapi_connection.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

    return out


def round_trips(path) -> int:
    """Times the client waited for the server: each Sync of the extended protocol and each
    simple Query ends a batch of messages the server answers."""
    with open(path) as trace:
        return sum(1 for line in trace if line.startswith("F\t") and line.split("\t")[2] in ("Sync", "Query"))


@pytest.mark.parametrize("limits", [{"concurrency": 5}, {"group_concurrency": 1, "fair": True}])
def test_a_limited_claim_is_one_round_trip(tenants, tmp_path, monkeypatch, limits):
    queue, engine = tenants
    monkeypatch.setattr(core_limits, "REFRESH_EVERY", 3600.0)  # no re-read of the limits mid-test
    queue.set_limits("tenants", **limits)
    queue.enqueue_many([{"task": "work", "payload": {}, "group_key": f"k{n}"} for n in range(6)])
    engine.dispose()  # the next connections are traced
    trace = traced(engine, tmp_path / "trace")
    try:
        assert len(queue.claim("tenants", worker_id="w", limit=1)) == 1  # reads the limits first
        before = round_trips(tmp_path / "trace")
        assert len(queue.claim("tenants", worker_id="w", limit=2)) == 2
        assert round_trips(tmp_path / "trace") - before == 1
    finally:
        engine.dispose()
        trace.close()


def test_a_claim_built_for_old_limits_claims_within_the_new_ones(tenants):
    """Worker A read `concurrency=10`; another process lowers it to 1. A's next claim, built
    for 10, finds the row changed under its lock, takes nothing, and claims again under 1."""
    queue, engine = tenants
    queue.set_limits("tenants", concurrency=10)
    queue.enqueue_many([{"task": "work", "payload": {}}] * 5)
    assert len(queue.claim("tenants", worker_id="a", limit=1)) == 1
    other = sq.Queue(engine, load_entrypoints=False)
    other.set_limits("tenants", concurrency=2)

    assert len(queue.claim("tenants", worker_id="a", limit=5)) == 1  # one running already, cap 2
    assert queue.claim("tenants", worker_id="a", limit=5) == []


HOLD_LIMIT_WRITES = """
CREATE FUNCTION hold_limit_writes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock_shared(4343);
  RETURN NEW;
END $$;
CREATE TRIGGER hold_limit_writes AFTER INSERT OR UPDATE ON sqla_queue_jobs_limits FOR EACH ROW
  EXECUTE FUNCTION hold_limit_writes();
"""


def waiting_backends(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(DISTINCT pid) FROM pg_locks WHERE NOT granted")).scalar_one()


def test_two_callers_changing_different_limits_at_once_both_keep_their_change(tenants):
    """Caller A sets a concurrency and is held before its commit (a trigger waits on a lock
    the test holds); caller B sets fair meanwhile. B waits for A's row and reads it after A
    commits: the queue ends with both. Read-then-write would have B overwrite A's change."""
    queue, engine = tenants
    with engine.begin() as conn:
        conn.exec_driver_sql(HOLD_LIMIT_WRITES)
    errors: list = []

    def change(**limits) -> None:
        try:
            sq.Queue(engine, load_entrypoints=False).set_limits("tenants", **limits)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    with engine.connect() as holder:
        holder.execute(text("SELECT pg_advisory_lock(4343)"))
        a = threading.Thread(target=change, kwargs={"concurrency": 5})
        a.start()
        wait_until(lambda: waiting_backends(engine) == 1, "caller A to hold its write uncommitted")
        b = threading.Thread(target=change, kwargs={"fair": True})
        b.start()
        wait_until(lambda: waiting_backends(engine) == 2, "caller B to wait")
        holder.execute(text("SELECT pg_advisory_unlock(4343)"))
        holder.commit()
    a.join(timeout=60)
    b.join(timeout=60)

    assert not errors, errors
    assert [state.limits for state in queue.list_queues()] == [sq.QueueLimits("tenants", concurrency=5, fair=True)]
