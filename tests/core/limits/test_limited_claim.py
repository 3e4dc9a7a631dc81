"""Limits enforced by the claim, across several workers claiming at once on real PostgreSQL; the
claim's round trips (counted in libpq's own trace) and `set_limits` from two callers at once.

Every start and end of a run is logged by a trigger on the job table (the database's clock at
the claim and at the outcome), so overlapping runs are found after the fact, whatever the
workers' timing: a job claimed while another of its key was still running starts before that
one's end."""

from __future__ import annotations

import threading
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import event as sqla_event
from sqlalchemy import text
from waiting import wait_until

import sqla_queue as sq
from sqla_queue.core import limits as core_limits

pytestmark = pytest.mark.slow

RUN_LOG = """
CREATE TABLE run_log (job_id bigint, group_key text, event text, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION log_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status = 'running' AND OLD.status = 'pending' THEN
    -- locked_at: when the claim let it start (a rate's token may be due a little later)
    INSERT INTO run_log (job_id, group_key, event, at) VALUES (NEW.id, NEW.group_key, 'start', NEW.locked_at);
  ELSIF OLD.status = 'running' AND NEW.status <> 'running' THEN
    INSERT INTO run_log (job_id, group_key, event) VALUES (NEW.id, NEW.group_key, 'end');
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER log_runs AFTER UPDATE OF status ON sqla_queue_jobs FOR EACH ROW EXECUTE FUNCTION log_runs();
"""


@pytest.fixture
def logged(own_database):
    _url, engine = own_database
    with engine.begin() as conn:
        conn.exec_driver_sql(RUN_LOG)
    queue = sq.Queue(engine, load_entrypoints=False)

    @queue.task(queue="tenants")
    def work(payload, ctx):
        return None

    return queue, engine


def runs(engine) -> list[tuple[str | None, object, object]]:
    """``(group_key, start, end)`` of every run, from the trigger's log."""
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT job_id, group_key, event, at FROM run_log ORDER BY at")).all()
    starts: dict[int, tuple] = {}
    found = []
    for job_id, key, event, at in rows:
        if event == "start":
            starts[job_id] = (key, at)
        else:
            key, started = starts.pop(job_id)
            found.append((key, started, at))
    assert not starts, "every run ended"
    return found


def most_at_once(intervals) -> int:
    """The largest number of intervals that overlap at one instant."""
    edges = sorted([(start, 1) for _, start, _ in intervals] + [(end, -1) for _, _, end in intervals],
                   key=lambda edge: (edge[0], edge[1]))
    most = current = 0
    for _, step in edges:
        current += step
        most = max(most, current)
    return most


def drain_with_workers(queue: sq.Queue, workers: int, **options) -> int:
    """`workers` workers, each in a thread of its own with its own connections, until empty."""
    results: list = []
    errors: list = []

    def run() -> None:
        try:
            results.append(queue.worker(queues=["tenants"], **options).run(until_empty=True))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    return sum(result.completed for result in results)


def test_group_concurrency_1_never_runs_two_jobs_of_a_key_at_once(logged):
    queue, engine = logged
    queue.set_limits("tenants", group_concurrency=1)
    queue.enqueue_many([{"task": "work", "payload": {}, "group_key": f"tenant-{n % 8}"} for n in range(240)]
                       + [{"task": "work", "payload": {}} for _ in range(10)])

    assert drain_with_workers(queue, 4, concurrency=4, poll_interval=0.05) == 250

    by_key = defaultdict(list)
    for key, start, end in runs(engine):
        by_key[key].append((key, start, end))
    assert sorted(k for k in by_key if k) == [f"tenant-{n}" for n in range(8)]
    assert {key: most_at_once(found) for key, found in by_key.items() if key} == {
        f"tenant-{n}": 1 for n in range(8)}
    assert most_at_once(by_key[None]) > 1  # jobs without a key are not serialized


HOLD = """
CREATE FUNCTION hold_writes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock_shared(4242);
  RETURN NEW;
END $$;
CREATE TRIGGER hold_writes AFTER {event} FOR EACH ROW {condition} EXECUTE FUNCTION hold_writes();
"""
HOLD_CLAIMS = HOLD.format(event="UPDATE OF status ON sqla_queue_jobs",
                          condition="WHEN (NEW.status = 'running' AND OLD.status = 'pending')")
"""A claim's transaction waits, its jobs marked running but uncommitted, while the test holds
advisory lock 4242."""


def waiting_backends(engine) -> int:
    """Backends of this test's database waiting on a lock: the server is shared with the other
    test processes, whose waits must not count."""
    with engine.connect() as conn:
        return conn.execute(text(
            "SELECT count(DISTINCT l.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE NOT l.granted AND a.datname = current_database()")).scalar_one()


def held_race(engine, first, second, between=lambda: None) -> None:
    """`first` in a thread until a `HOLD` trigger holds it uncommitted, `between`, then
    `second` in a thread until it waits (for `first`); then both let go and finished."""
    with engine.connect() as holder:
        holder.execute(text("SELECT pg_advisory_lock(4242)"))
        a = threading.Thread(target=first)
        a.start()
        wait_until(lambda: waiting_backends(engine) == 1, "the first to be held uncommitted")
        between()
        b = threading.Thread(target=second)
        b.start()
        wait_until(lambda: waiting_backends(engine) == 2, "the second to wait")
        holder.execute(text("SELECT pg_advisory_unlock(4242)"))
        holder.commit()
    a.join(timeout=60)
    b.join(timeout=60)


@pytest.mark.parametrize("limits", [{"group_concurrency": 1}, {"concurrency": 1}])
def test_a_claim_that_starts_while_another_is_uncommitted_sees_its_jobs_running(logged, limits):
    """The race a cap must survive, made to happen: claim A has marked its job running but not
    committed (a trigger holds it there), a more urgent job of the key arrives, and claim B
    starts. B waits for A's limits lock, and its snapshot, taken after A commits, counts A's
    job: B claims nothing. Without the lock B would count no running job and claim the new one."""
    queue, engine = logged
    queue.set_limits("tenants", **limits)
    first, second = queue.enqueue_many([{"task": "work", "payload": {}, "group_key": "k"}] * 2)
    with engine.begin() as conn:
        conn.exec_driver_sql(HOLD_CLAIMS)
    claimed: dict[str, list] = {}
    urgent: list[int] = []

    def claim(name: str) -> None:
        claimed[name] = queue.claim("tenants", worker_id=name, limit=10)

    held_race(engine, lambda: claim("a"), lambda: claim("b"),
              between=lambda: urgent.append(queue.enqueue("work", {}, group_key="k", priority=10)))

    assert [job.id for job in claimed["a"]] == [first] and claimed["b"] == []
    assert {queue.get_job(job).status for job in (second, *urgent)} == {sq.JobStatus.PENDING}


def test_concurrency_caps_the_running_jobs_of_the_queue_across_workers(logged):
    queue, engine = logged
    queue.set_limits("tenants", concurrency=3)
    queue.enqueue_many([{"task": "work", "payload": {}} for _ in range(200)])

    assert drain_with_workers(queue, 4, concurrency=4, poll_interval=0.05) == 200

    found = runs(engine)
    assert len(found) == 200 and most_at_once(found) == 3


def test_group_concurrency_2_allows_two_per_key_and_no_more(logged):
    queue, engine = logged
    queue.set_limits("tenants", group_concurrency=2, concurrency=5)
    queue.enqueue_many([{"task": "work", "payload": {}, "group_key": f"k{n % 3}"} for n in range(150)])

    assert drain_with_workers(queue, 3, concurrency=4, poll_interval=0.05) == 150

    found = runs(engine)
    per_key = {key: most_at_once([run for run in found if run[0] == key]) for key in ("k0", "k1", "k2")}
    assert max(per_key.values()) == 2 and most_at_once(found) <= 5


def test_claim_within_limits_through_the_api(logged):
    """`queue.claim` honours the limits too, and a claim a limit held back is counted as
    throttled, not as an empty claim."""
    queue, _engine = logged
    queue.enqueue_many([{"task": "work", "payload": {}, "group_key": key} for key in "aab"])
    queue.set_limits("tenants", group_concurrency=1)

    first = queue.claim("tenants", worker_id="w", limit=10)
    assert sorted(job.id for job in first) == [1, 3]
    assert queue.claim("tenants", worker_id="w", limit=10) == []
    health = queue.stats(window=timedelta(minutes=5))["tenants"]
    assert health.throttled == 2 and health.empty_claims_locked == 0
    assert queue.complete(first[0].id, first[0].claim_token)
    assert [job.id for job in queue.claim("tenants", worker_id="w", limit=10)] == [2]


def test_a_grouped_claim_takes_the_queue_head_in_claim_order_when_its_keys_have_room(logged):
    """Twenty keys, one job each, the last key's job the most urgent: with room in every key the
    claim follows the claim order across the whole queue (a rotation would have looked at the
    keys after its cursor first)."""
    queue, _engine = logged
    queue.set_limits("tenants", group_concurrency=1)
    queue.enqueue_many([{"task": "work", "payload": {"key": f"k{n}"}, "group_key": f"k{n}",
                         "priority": 10 if n == 20 else 0} for n in range(1, 21)])

    [job] = queue.claim("tenants", worker_id="w", limit=1)
    [second] = queue.claim("tenants", worker_id="w", limit=1)

    assert (job.payload["key"], second.payload["key"]) == ("k20", "k1")


def test_a_grouped_claim_reaches_past_a_head_held_by_a_busy_key(logged):
    """The head of the queue (more than four times the batch) is all one key's, and that key is
    at its cap: the claim finds the other keys by rotation instead of taking nothing."""
    queue, _engine = logged
    queue.set_limits("tenants", group_concurrency=1)
    queue.enqueue_many([{"task": "work", "payload": {"key": "busy"}, "group_key": "busy", "priority": 5}
                        for _ in range(20)])
    queue.enqueue_many([{"task": "work", "payload": {"key": key}, "group_key": key} for key in ("quiet-1", "quiet-2")])
    [running] = queue.claim("tenants", worker_id="w", limit=1)
    assert running.payload["key"] == "busy"

    got = queue.claim("tenants", worker_id="w", limit=2)

    assert sorted(job.payload["key"] for job in got) == ["quiet-1", "quiet-2"]


def starts(engine) -> list[tuple[str | None, object]]:
    """``(group_key, start)`` of every claim, in the order they started (the trigger's log)."""
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(text(
            "SELECT group_key, at FROM run_log WHERE event = 'start' ORDER BY at, job_id")).all()]


def most_in_one_second(times) -> int:
    """The most starts in any window of one second (each window starting at a start)."""
    times = sorted(times)
    most, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] >= timedelta(seconds=1):
            first += 1
        most = max(most, last - first + 1)
    return most


def test_a_rate_holds_across_workers_in_every_one_second_window(logged):
    """100/s over four workers claiming at once: no second holds more than 1 % over the rate
    (a bucket of one start, a hundredth of the count, is all a window may add)."""
    queue, engine = logged
    queue.set_limits("tenants", rate="100/s")
    queue.enqueue_many([{"task": "work", "payload": {}}] * 250)

    assert drain_with_workers(queue, 4, concurrency=4, poll_interval=0.05) == 250

    assert most_in_one_second([at for _key, at in starts(engine)]) <= 101


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_job_claimed_ahead_of_its_rates_token_starts_when_the_token_is_due(own_database, kind):
    """20/s (a bucket of one) and ten jobs for one worker of concurrency 10: its claims take
    tokens up to `RATE_AHEAD` early, each job's ``locked_at`` is when its token is due (1/20 s
    apart), and no handler starts before it. A worker that ran them at once would start nine
    of them early."""
    _url, engine = own_database
    queue = sq.Queue(engine, load_entrypoints=False)
    started: dict[int, datetime] = {}

    def record(ctx):
        started[ctx.job_id] = datetime.now(timezone.utc)

    if kind == "sync":
        queue.task(name="work", queue="tenants")(lambda payload, ctx: record(ctx))
    else:
        @queue.task(name="work", queue="tenants")
        async def work(payload, ctx):
            record(ctx)

    queue.set_limits("tenants", rate="20/s")
    ids = queue.enqueue_many([{"task": "work", "payload": {}}] * 10)
    assert drain_with_workers(queue, 1, concurrency=10, poll_interval=0.05) == 10

    due = {job_id: queue.get_job(job_id).locked_at for job_id in ids}
    assert max(due.values()) - min(due.values()) >= timedelta(seconds=9 / 20 - 0.01)
    early = {job_id: due[job_id] - started[job_id] for job_id in ids if started[job_id] < due[job_id]}
    assert not early, f"started before their tokens were due: {early}"


def test_fair_claims_over_several_workers_serve_a_small_tenant_behind_a_backlog(logged):
    """Tenant B's 20 jobs are enqueued after tenant A's 300; with fair turns three workers
    claiming at once start B's jobs alongside A's, not after them: B's last start comes within
    the first 2 × 20 starts, give or take what the workers claim in one round. Without
    prefetch: a worker's buffer (claimed, not started) would shift its starts behind the other
    workers' by however late that worker began, which is about timing, not fairness."""
    queue, engine = logged
    queue.set_limits("tenants", fair=True)
    queue.enqueue_many([{"task": "work", "payload": {}, "group_key": "A"}] * 300)
    queue.enqueue_many([{"task": "work", "payload": {}, "group_key": "B"}] * 20)

    assert drain_with_workers(queue, 3, concurrency=4, prefetch=0, poll_interval=0.05) == 320

    order = [key for key, _at in starts(engine)]
    last_b = max(position for position, key in enumerate(order) if key == "B")
    assert last_b < 2 * 20 + 3 * 4


# -- one round trip, a claim built for old limits, set_limits from two callers --------------

def traced(engine, path):
    """Every new connection of `engine` writes libpq's trace of its messages to `path`."""
    from psycopg import pq

    out = open(path, "w")  # noqa: SIM115 - open for the engine's life, closed by the test

    @sqla_event.listens_for(engine, "connect")
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
def test_a_limited_claim_is_one_round_trip(logged, tmp_path, monkeypatch, limits):
    queue, engine = logged
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


COMMIT_LOG = """
CREATE TABLE commit_log (job_id bigint, status text, synchronous_commit text);
CREATE FUNCTION log_commits() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO commit_log VALUES (NEW.id, NEW.status, current_setting('synchronous_commit'));
  RETURN NEW;
END $$;
CREATE TRIGGER log_commits AFTER UPDATE OF status ON sqla_queue_jobs FOR EACH ROW EXECUTE FUNCTION log_commits();
"""


@pytest.mark.parametrize("path", ["one round trip", "under the lock"])
def test_a_limited_claim_commits_without_its_flush_and_a_worker_completes_in_a_durable_transaction(
        logged, monkeypatch, path):
    """A limited claim's commit does not wait for its WAL flush (it would hold the queue's
    limits lock through it); the worker's completions, which a limited queue's worker sends
    before its next claim, commit with PostgreSQL's (durable) setting. Each status change logs
    the ``synchronous_commit`` of the transaction that made it."""
    queue, engine = logged
    with engine.begin() as conn:
        conn.exec_driver_sql(COMMIT_LOG)
    if path == "under the lock":  # a driver without the fast path, or a change of limits
        monkeypatch.setattr(queue.core.executor, "one_round_trip", lambda steps: None)
    queue.set_limits("tenants", group_concurrency=1)
    queue.enqueue_many([{"task": "work", "payload": {}, "group_key": f"k{n % 3}"} for n in range(6)])

    summary = queue.worker(queues=["tenants"], concurrency=2, poll_interval=0.05).run(until_empty=True)

    assert summary.completed == 6
    with engine.connect() as conn:
        seen = {(status, setting) for status, setting in conn.execute(text(
            "SELECT status, synchronous_commit FROM commit_log")).all()}
    assert seen == {("running", "off"), ("completed", "on")}


def test_a_claim_built_for_old_limits_claims_within_the_new_ones(logged):
    """Worker A read `concurrency=10`; another process lowers it to 1. A's next claim, built
    for 10, finds the row changed under its lock, takes nothing, and claims again under 1."""
    queue, engine = logged
    queue.set_limits("tenants", concurrency=10)
    queue.enqueue_many([{"task": "work", "payload": {}}] * 5)
    assert len(queue.claim("tenants", worker_id="a", limit=1)) == 1
    other = sq.Queue(engine, load_entrypoints=False)
    other.set_limits("tenants", concurrency=2)

    assert len(queue.claim("tenants", worker_id="a", limit=5)) == 1  # one running already, cap 2
    assert queue.claim("tenants", worker_id="a", limit=5) == []


HOLD_LIMIT_WRITES = HOLD.format(event="INSERT OR UPDATE ON sqla_queue_jobs_limits", condition="")


def test_two_callers_changing_different_limits_at_once_both_keep_their_change(logged):
    """Caller A sets a concurrency and is held before its commit (a trigger waits on a lock
    the test holds); caller B sets fair meanwhile. B waits for A's row and reads it after A
    commits: the queue ends with both. Read-then-write would have B overwrite A's change."""
    queue, engine = logged
    with engine.begin() as conn:
        conn.exec_driver_sql(HOLD_LIMIT_WRITES)
    errors: list = []

    def change(**limits) -> None:
        try:
            sq.Queue(engine, load_entrypoints=False).set_limits("tenants", **limits)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    held_race(engine, lambda: change(concurrency=5), lambda: change(fair=True))

    assert not errors, errors
    assert [state.limits for state in queue.list_queues()] == [sq.QueueLimits("tenants", concurrency=5, fair=True)]
