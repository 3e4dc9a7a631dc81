"""The worker in-process: draining, outcomes through the strategy hooks, slots, timeouts,
lost claims, release on stop, LISTEN wake-ups and configuration errors."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import text

import sqla_queue as sq
from sqla_queue.errors import ConfigurationError, NonRetryableError
from sqla_queue.worker import claim_loop
from sqla_queue.worker.worker import WorkerConfig

FAST = {"poll_interval": 0.05, "lease": timedelta(seconds=6)}


def status_counts(engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT status, count(*) FROM sqla_queue_jobs GROUP BY status"))
        return dict(rows.all())


def test_until_empty_runs_every_due_job_once_and_returns(queue, engine):
    seen: list[int] = []
    lock = threading.Lock()

    @queue.task
    def record(payload, ctx):
        with lock:
            seen.append(payload["n"])

    queue.enqueue_many([{"task": "record", "payload": {"n": n}} for n in range(300)])
    summary = queue.worker(concurrency=8, **FAST).run(until_empty=True)

    assert sorted(seen) == list(range(300))
    assert summary.claimed == summary.completed == 300
    assert status_counts(engine) == {"completed": 300}


def test_handler_context_carries_the_job_and_a_stable_idempotency_key(queue):
    contexts: list[sq.JobContext] = []

    @queue.task(queue="ctx")
    def capture(payload, ctx):
        contexts.append(ctx)
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")

    job_id = queue.enqueue("capture", {})
    worker = queue.worker(queues=["ctx"], concurrency=1, **FAST)
    worker.run(until_empty=True)
    with queue.engine.begin() as conn:  # make the retry due now
        conn.execute(text("UPDATE sqla_queue_jobs SET run_at = now() WHERE id = :id"), {"id": job_id})
    worker.run(until_empty=True)

    assert [c.attempt for c in contexts] == [1, 2]
    assert {c.job_id for c in contexts} == {job_id}
    assert {c.queue for c in contexts} == {"ctx"}
    assert contexts[0].idempotency_key == contexts[1].idempotency_key == f"sqla_queue-job-{job_id}"
    assert contexts[0].claim_token != contexts[1].claim_token
    assert queue.get_job(job_id).status is sq.JobStatus.COMPLETED


def test_failing_handler_is_retried_then_fails_with_its_last_error(queue):
    @queue.task(max_attempts=3)
    def flaky(payload, ctx):
        raise ValueError(f"attempt {ctx.attempt} broke")

    job_id = queue.enqueue("flaky", {})
    worker = queue.worker(concurrency=1, **FAST)
    for _ in range(3):
        worker.run(until_empty=True)
        with queue.engine.begin() as conn:
            conn.execute(text("UPDATE sqla_queue_jobs SET run_at = now() WHERE id = :id"), {"id": job_id})

    job = queue.get_job(job_id)
    assert job.status is sq.JobStatus.FAILED
    assert job.attempts == 3
    assert job.last_error == "ValueError: attempt 3 broke"
    assert worker.summary.retried == 2 and worker.summary.failed == 1


def test_a_non_retryable_error_fails_at_once_and_an_unknown_tasks_job_is_left_pending(queue, engine):
    @queue.task
    def refuse(payload, ctx):
        raise NonRetryableError("bad input, retrying cannot help")

    refused = queue.enqueue("refuse", {})
    queue.enqueue("send_email", {})
    with engine.begin() as conn:  # a job whose task this process does not know
        conn.execute(text("UPDATE sqla_queue_jobs SET task = 'gone_task' WHERE task = 'send_email'"))

    queue.worker(concurrency=2, **FAST).run(until_empty=True)

    assert queue.get_job(refused).attempts == 1
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT task, status, attempts, last_error FROM sqla_queue_jobs ORDER BY id")).all()
    # Not claimed at all: it waits for a worker that registers its task (a rolling deploy).
    assert [(r.task, r.status, r.attempts, r.last_error) for r in rows][1] == ("gone_task", "pending", 0, None)
    assert (rows[0].task, rows[0].status, rows[0].attempts) == ("refuse", "failed", 1)


def test_claims_never_exceed_free_slots(queue):
    concurrency = 3
    running = 0
    peak = 0
    lock = threading.Lock()
    release = threading.Event()

    @queue.task
    def hold(payload, ctx):
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        release.wait(0.02)
        with lock:
            running -= 1

    queue.enqueue_many([{"task": "hold", "payload": {}} for _ in range(60)])
    worker = queue.worker(concurrency=concurrency, batch_size=50, **FAST)
    worker.run(until_empty=True)

    assert peak <= concurrency
    assert worker.summary.completed == 60
    with queue.engine.connect() as conn:
        most_running = conn.execute(text("SELECT count(*) FROM sqla_queue_jobs WHERE status = 'running'")).scalar()
    assert most_running == 0


def test_handler_timeout_fails_the_attempt_and_discards_the_late_result(queue):
    finish = threading.Event()

    @queue.task(timeout=0.3, max_attempts=1)
    def slow(payload, ctx):
        finish.wait(5)

    job_id = queue.enqueue("slow", {})
    worker = queue.worker(concurrency=1, **FAST)
    runner = threading.Thread(target=worker.run, kwargs={"until_empty": True})
    runner.start()
    try:
        timed_out = _wait_for(lambda: queue.get_job(job_id).status is sq.JobStatus.FAILED)
    finally:
        finish.set()  # the handler now returns normally: its result must be ignored
        runner.join(10)
    job = queue.get_job(job_id)
    assert timed_out and not runner.is_alive()
    assert job.status is sq.JobStatus.FAILED
    assert job.last_error == "TimeoutError: handler exceeded its timeout of 0.3s"
    assert worker.summary.failed == 1 and worker.summary.completed == 0


def test_heartbeat_reports_a_job_taken_away_as_lost_and_never_records_its_outcome(queue, engine):
    lost: list = []
    started = threading.Event()
    finish = threading.Event()

    class Spy:
        @sq.hookimpl
        def sqla_queue_lost_claim(self, event):
            lost.append(event)

    queue.plugin_manager.register(Spy())

    @queue.task
    def long(payload, ctx):
        started.set()
        finish.wait(10)

    job_id = queue.enqueue("long", {})
    worker = queue.worker(concurrency=1, poll_interval=0.05, lease=timedelta(seconds=0.9))
    runner = threading.Thread(target=worker.run, kwargs={"until_empty": True})
    runner.start()
    try:
        assert started.wait(10)
        with engine.begin() as conn:  # an operator takes the job back and finishes it by hand
            conn.execute(text("UPDATE sqla_queue_jobs SET status = 'completed', claim_token = 'operator' "
                              "WHERE id = :id"), {"id": job_id})
        assert _wait_for(lambda: lost)
    finally:
        finish.set()
        runner.join(10)
    assert lost[0].job_id == job_id and lost[0].operation == "heartbeat"
    assert "another claim" in lost[0].reason
    assert worker.summary.lost == 1 and worker.summary.completed == 0
    assert queue.get_job(job_id).status is sq.JobStatus.COMPLETED  # the operator's, untouched


def test_stop_releases_unfinished_jobs_without_spending_an_attempt(queue):
    started = threading.Event()
    never = threading.Event()

    @queue.task
    def stuck(payload, ctx):
        started.set()
        never.wait(10)

    job_id = queue.enqueue("stuck", {})
    waiting = queue.enqueue("stuck", {})
    worker = queue.worker(concurrency=1, shutdown_grace=0.2, **FAST)
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        assert started.wait(10)
        worker.stop()
        runner.join(10)
    finally:
        never.set()
    job = queue.get_job(job_id)
    assert not runner.is_alive()
    assert job.status is sq.JobStatus.PENDING and job.attempts == 0
    assert job.last_error == "released unfinished at worker shutdown"
    # Not run; pending with no attempt spent, whether it was never claimed or waited in the
    # prefetch buffer (then released with the running one).
    assert (queue.get_job(waiting).status, queue.get_job(waiting).attempts) == (sq.JobStatus.PENDING, 0)
    assert worker.summary.released == worker.summary.claimed


def test_an_enqueue_wakes_an_idle_worker_long_before_its_poll_interval(queue):
    ran = threading.Event()

    @queue.task
    def ping(payload, ctx):
        ran.set()

    worker = queue.worker(concurrency=1, poll_interval=30, lease=timedelta(seconds=6))
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        assert _wait_for(lambda: worker._listener_connected())
        queue.enqueue("ping", {})
        woke = ran.wait(10)  # 30 s would pass before a poll found it
    finally:
        worker.stop()
        runner.join(10)
    assert woke


def test_worker_serves_several_queues(queue):
    done: list[str] = []

    @queue.task(queue="a")
    def on_a(payload, ctx):
        done.append("a")

    @queue.task(queue="b")
    def on_b(payload, ctx):
        done.append("b")

    queue.enqueue_many([{"task": "on_a", "payload": {}}] * 5 + [{"task": "on_b", "payload": {}}] * 5)
    queue.worker(queues=["a", "b"], concurrency=2, **FAST).run(until_empty=True)
    assert sorted(done) == ["a"] * 5 + ["b"] * 5


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrancy": 4}, "unknown worker option 'concurrancy'; did you mean 'concurrency'?"),
        ({"concurrency": 0}, "concurrency must be a positive integer"),
        ({"queues": []}, "queues must name at least one queue"),
        ({"queues": ["ok", " bad"]}, "queue 'bad' has leading or trailing whitespace"),
        ({"lease": -1}, "lease must be positive"),
        ({"poll_interval": 0}, "poll_interval must be a positive number"),
        ({"lease": 4, "call_timeout": 5}, "call_timeout must be shorter than the lease"),
    ],
)
def test_bad_worker_options_name_the_problem(options, message):
    with pytest.raises(ConfigurationError) as info:
        WorkerConfig.build(**options)
    assert message in str(info.value)


def _wait_for(condition, timeout: float = 10.0) -> bool:
    """Poll `condition` until true or `timeout`; the event under test has no hook to wait on."""
    stop = threading.Event()
    waited = 0.0
    while waited < timeout:
        if condition():
            return True
        stop.wait(0.02)
        waited += 0.02
    return bool(condition())


def test_until_empty_also_runs_a_retry_that_is_due_at_once(queue):
    attempts: list[int] = []

    @queue.task(max_attempts=2, retry_delay=timedelta(0))
    def twice(payload, ctx):
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")

    job_id = queue.enqueue("twice", {})
    queue.worker(concurrency=1, **FAST).run(until_empty=True)
    assert attempts == [1, 2]
    assert queue.get_job(job_id).status is sq.JobStatus.COMPLETED


def test_a_job_that_becomes_due_behind_the_claim_position_runs_while_the_backlog_drains(queue, engine):
    """While a backlog drains, each claim starts where the last one got to in claim order; a
    job enqueued mid-drain with a ``run_at`` older than that position sits behind it. The
    periodic claim from the start finds it within about a second, not after the backlog."""
    seen: list[str] = []
    lock = threading.Lock()

    @queue.task
    def record(payload, ctx):
        time.sleep(0.004)
        with lock:
            seen.append(payload["n"])
            if payload["n"] == "100":  # early in the drain: a job that was due an hour ago
                queue.enqueue("record", {"n": "late"}, run_at=datetime.now(timezone.utc) - timedelta(hours=1))

    queue.enqueue_many([{"task": "record", "payload": {"n": str(n)}} for n in range(3000)])
    summary = queue.worker(concurrency=4, batch_size=4, **FAST).run(until_empty=True)

    assert summary.claimed == summary.completed == 3001
    assert status_counts(engine) == {"completed": 3001}
    assert seen.index("late") < len(seen) - 500, "the late job waited for the backlog to run out"


def test_the_first_completions_go_in_a_claim_from_the_head_of_the_claim_order(queue, monkeypatch):
    """A worker's first rounds claim from the head: the one that carries its first completions
    does not wait to build and compile the claim from a position; later rounds resume."""
    @queue.task(name="quick")
    def quick(payload, ctx):
        return None

    queue.enqueue_many([{"task": "quick", "payload": {}} for _ in range(60)])
    worker = queue.worker(concurrency=4, batch_size=4, **FAST)
    executor = worker.claim_loop.core.executor
    rounds: list[tuple[bool, int]] = []  # (from a position, completions carried)
    real_round = executor.run_round

    def run_round(conn, params, *, from_position=False):
        rounds.append((from_position, len(params["job_ids"])))
        return real_round(conn, params, from_position=from_position)

    monkeypatch.setattr(executor, "run_round", run_round)
    summary = worker.run(until_empty=True)

    assert summary.completed == 60
    first_completing = next(n for n, (_, completed) in enumerate(rounds) if completed)
    assert not any(from_position for from_position, _ in rounds[:first_completing + 1])
    assert any(from_position for from_position, _ in rounds), "no round resumed from a position"


def test_a_worker_under_a_backlog_puts_off_its_first_periodic_passes_until_its_warm_up_ends(queue, monkeypatch):
    """The first periodic passes (recovery, pruning, sampling) compile their statements, which
    would stall a starting worker's rounds: while claims find jobs they wait `WARM_UP` after the
    first claim, then run between rounds as before."""
    monkeypatch.setattr(claim_loop, "WARM_UP", 0.4)

    @queue.task(name="brief")
    def brief(payload, ctx):
        time.sleep(0.01)

    # At least 1.2 s of handler time (480 x 10 ms over 4 slots): the backlog outlasts the
    # warm-up however fast the claims are, so no empty claim ends it early.
    queue.enqueue_many([{"task": "brief", "payload": {}} for _ in range(480)])
    worker = queue.worker(concurrency=4, batch_size=4, **FAST)
    events: list[tuple[str, float]] = []
    executor, periodic = worker.claim_loop.core.executor, worker.claim_loop.periodic
    real_round, real_passes = executor.run_round, periodic.run_due

    def run_round(conn, params, *, from_position=False):
        events.append(("round", time.monotonic()))
        return real_round(conn, params, from_position=from_position)

    def run_due():
        events.append(("passes", time.monotonic()))
        real_passes()

    monkeypatch.setattr(executor, "run_round", run_round)
    monkeypatch.setattr(periodic, "run_due", run_due)
    assert worker.run(until_empty=True).completed == 480

    first_round = next(at for kind, at in events if kind == "round")
    first_passes = next(n for n, (kind, _) in enumerate(events) if kind == "passes")
    assert events[first_passes][1] - first_round >= 0.4
    assert sum(kind == "round" for kind, _ in events[:first_passes]) > 10
    assert any(kind == "round" for kind, _ in events[first_passes:]), "the passes waited for the backlog to end"


def test_the_last_jobs_of_a_drain_complete_before_the_first_periodic_passes(queue, monkeypatch):
    """A claim that finds nothing more while jobs are still held does not end the warm-up:
    the passes (some 50 ms of the interpreter, their statements compiled on first use) would
    hold back the completions of the last jobs of a drain."""

    @queue.task(name="brief")
    def brief(payload, ctx):
        time.sleep(0.03)

    # Two handlers and four prefetched: the first round claims all six, the next finds none
    # while five are still held.
    queue.enqueue_many([{"task": "brief", "payload": {}} for _ in range(6)])
    worker = queue.worker(concurrency=2, prefetch=4, **FAST)
    periodic, slots = worker.claim_loop.periodic, worker.slots
    held_at_passes: list[int] = []
    real_passes = periodic.run_due

    def run_due():
        held_at_passes.append(slots.held_count())
        real_passes()

    monkeypatch.setattr(periodic, "run_due", run_due)
    assert worker.run(until_empty=True).completed == 6

    assert held_at_passes, "the passes never ran"
    assert held_at_passes[0] == 0, f"the first passes ran with {held_at_passes[0]} job(s) still held"


def test_until_empty_stops_only_after_a_claim_from_the_start_finds_nothing(queue, engine):
    """A claim that starts from a position can come back empty while jobs wait behind it."""
    job_id = queue.enqueue("send_email", {})
    worker = queue.worker(concurrency=1, **FAST)
    worker.claim_loop.turn = claim_loop.HEAD_ROUNDS  # past the claims that always start at the head
    worker.claim_loop.positions["default"] = (0, datetime.now(timezone.utc) + timedelta(days=1), 2**62)
    worker.claim_loop.restart_at["default"] = time.monotonic() + 3600

    summary = worker.run(until_empty=True)

    assert summary.completed == 1
    assert queue.get_job(job_id).status is sq.JobStatus.COMPLETED


def test_until_empty_ends_without_waiting_a_poll_interval_after_the_last_job(queue):
    """The last look for more comes once the last held job is settled, not a poll interval
    later: a script's ``--until-empty`` worker exits when its work is done."""
    import time as time_module

    @queue.task(name="brief")
    def brief(payload, ctx):
        return None

    queue.enqueue("brief", {})
    started = time_module.monotonic()
    summary = queue.worker(concurrency=2, poll_interval=30,
                           lease=timedelta(seconds=6)).run(until_empty=True)
    assert summary.completed == 1
    assert time_module.monotonic() - started < 15  # a poll interval is 30 s


def test_a_worker_keeps_its_position_while_jobs_trickle_in_and_finds_one_due_behind_it(queue):
    """A queue that runs dry between jobs: the worker keeps claiming from its position (it keeps
    it when a claim comes up short), so its claims do not read the index entries of every job
    claimed since the last VACUUM. A job that becomes due behind the position is found by the
    claim from the start within about a second, with no other job to wake the worker and a poll
    interval of 30 s."""
    ran: dict = {}

    @queue.task
    def record(payload, ctx):
        ran[payload["n"]] = time.monotonic()

    worker = queue.worker(concurrency=2, poll_interval=30, lease=timedelta(seconds=6))
    claims: list = []
    real = worker.core.outcomes.complete_and_claim

    def recorded(finished, queues, worker_id, limit, positions, *rest):
        results, jobs = real(finished, queues, worker_id, limit, positions, *rest)
        if limit:
            claims.append(positions.get("default"))
        return results, jobs

    worker.core.outcomes.complete_and_claim = recorded
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        for n in range(40):
            queue.enqueue("record", {"n": n})
            time.sleep(0.05)
        assert _wait(lambda: len(ran) == 40)
        late_at = time.monotonic()
        queue.enqueue("record", {"n": "late"}, run_at=datetime.now(timezone.utc) - timedelta(hours=1))
        assert _wait(lambda: "late" in ran)
    finally:
        worker.stop()
        runner.join(15)
    from_position = [position for position in claims if position is not None]
    assert len(from_position) > len(claims) / 2, claims
    assert ran["late"] - late_at < claim_loop.RESTART_CLAIM_ORDER_EVERY + 2


def _wait(condition, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not condition():
        time.sleep(0.01)
    return condition()
