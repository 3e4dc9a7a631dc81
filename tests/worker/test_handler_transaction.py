"""``ctx.transaction()``: the handler's writes and its job's completion commit together or not
at all, in a worker (sync and async handlers) and in one run driven by hand.

The fault tests with real worker processes (SIGKILL storms, a frozen worker) are in
test_crash.py and test_transaction_faults.py; these pin each branch of the block: commit, an
exception, a lost claim, a cancel request, misuse, and the session it opens.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

import sqla_queue as sq
from sqla_queue.worker.job_run import run_claimed_job

FAST = {"poll_interval": 0.05, "concurrency": 2}
INSERT = text("INSERT INTO handler_effects (job_id, note) VALUES (:job_id, :note)")


@pytest.fixture
def effects(engine):
    """An application table the handlers write to; the count query of a job's rows."""
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS handler_effects"))
        conn.execute(text("CREATE TABLE handler_effects (id bigserial PRIMARY KEY, job_id bigint, note text)"))

    def rows(job_id: int | None = None) -> list[tuple]:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(
                text("SELECT job_id, note FROM handler_effects WHERE CAST(:job_id AS bigint) IS NULL OR job_id = :job_id "
                     "ORDER BY id"), {"job_id": job_id})]

    yield rows
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS handler_effects"))


@pytest.fixture
def events():
    """Lifecycle events as a plugin sees them."""
    seen: list[tuple[str, object]] = []

    class Recorder:
        @sq.hookimpl
        def sqla_queue_job_completed(self, event):
            seen.append(("completed", event))

        @sq.hookimpl
        def sqla_queue_lost_claim(self, event):
            seen.append(("lost", event))

    return seen, Recorder()


def write_in_transaction(payload, ctx):
    with ctx.transaction() as session:
        session.execute(INSERT, {"job_id": ctx.job_id, "note": payload["note"]})
        ctx.set_result({"wrote": payload["note"]})
        if payload.get("fail"):
            raise RuntimeError("failed inside the block")


def test_the_writes_and_the_completion_commit_together(engine, clean_jobs, effects, events):
    seen, recorder = events
    queue = sq.Queue(engine, load_entrypoints=False, plugins=[recorder])
    queue.task(name="write")(write_in_transaction)
    job_id = queue.enqueue("write", {"note": "mailed"})

    summary = queue.worker(**FAST).run(until_empty=True)

    job = queue.get_job(job_id)
    assert (summary.completed, summary.lost, job.status, job.result) == (1, 0, sq.JobStatus.COMPLETED,
                                                                          {"wrote": "mailed"})
    assert effects(job_id) == [(job_id, "mailed")]
    assert [kind for kind, _ in seen] == ["completed"]  # announced once, by the transaction


def test_an_exception_in_the_block_rolls_back_and_the_job_is_retried(engine, clean_jobs, effects):
    queue = sq.Queue(engine, load_entrypoints=False)
    queue.task(name="write", max_attempts=2)(write_in_transaction)
    job_id = queue.enqueue("write", {"note": "never", "fail": True})

    [claimed] = queue.claim(worker_id="w", limit=1)
    ran = run_claimed_job(queue.core, claimed)

    job = queue.get_job(job_id)
    assert (ran.outcome, job.status, job.attempts, job.result) == ("retried", sq.JobStatus.PENDING, 1, None)
    assert "failed inside the block" in job.last_error
    assert effects() == []


def test_a_lost_claim_rolls_back_and_raises_lost_claim_error(engine, clean_jobs, effects, events):
    """The claim was recovered and the job completed by another claim: the stale run's block
    commits nothing, the handler sees LostClaimError, the loss is reported once."""
    seen, recorder = events
    queue = sq.Queue(engine, load_entrypoints=False, plugins=[recorder])
    raised: list[BaseException] = []

    @queue.task(name="write")
    def write(payload, ctx):
        try:
            write_in_transaction(payload, ctx)
        except sq.LostClaimError as exc:
            raised.append(exc)
            raise

    job_id = queue.enqueue("write", {"note": "stale"})
    [stale] = queue.claim(worker_id="stale", limit=1)
    with engine.begin() as conn:  # its lease ran out long ago
        conn.execute(text("UPDATE sqla_queue_jobs SET lease_expires_at = NULL, locked_at = now() - interval '1 hour'"))
    assert queue.recover_expired(lease=timedelta(seconds=60)) == [job_id]
    [fresh] = queue.claim(worker_id="fresh", limit=1)
    assert run_claimed_job(queue.core, fresh).outcome == "completed"

    ran = run_claimed_job(queue.core, stale)

    assert ran.outcome == "lost" and isinstance(ran.error, sq.LostClaimError)
    assert f"job {job_id}" in str(raised[0]) and "nothing it wrote was committed" in str(raised[0])
    assert effects(job_id) == [(job_id, "stale")]  # the fresh claim's row only
    assert queue.get_job(job_id).status is sq.JobStatus.COMPLETED
    lost = [event for kind, event in seen if kind == "lost"]
    assert [(e.job_id, e.operation, e.claim_token) for e in lost] == [(job_id, "transaction", stale.claim_token)]


def test_a_cancel_request_rolls_back_and_the_job_ends_cancelled(engine, clean_jobs, effects):
    queue = sq.Queue(engine, load_entrypoints=False)
    queue.task(name="write")(write_in_transaction)
    job_id = queue.enqueue("write", {"note": "unwanted"})
    [claimed] = queue.claim(worker_id="w", limit=1)
    queue.cancel(job_id)  # running: a request its worker has not seen yet

    ran = run_claimed_job(queue.core, claimed)

    assert ran.outcome == "cancelled" and isinstance(ran.error, sq.JobCancelledError)
    assert "nothing it wrote was committed" in str(ran.error)
    assert queue.get_job(job_id).status is sq.JobStatus.CANCELLED
    assert effects() == []


def test_writes_after_the_block_do_not_change_the_completed_job(engine, clean_jobs, effects, caplog):
    queue = sq.Queue(engine, load_entrypoints=False)

    @queue.task(name="write")
    def write(payload, ctx):
        write_in_transaction(payload, ctx)
        raise RuntimeError("after the commit")

    job_id = queue.enqueue("write", {"note": "kept"})
    [claimed] = queue.claim(worker_id="w", limit=1)
    with caplog.at_level(logging.WARNING, logger="sqla_queue.worker"):
        ran = run_claimed_job(queue.core, claimed)

    assert ran.outcome == "completed"
    assert queue.get_job(job_id).status is sq.JobStatus.COMPLETED
    assert effects(job_id) == [(job_id, "kept")]
    assert "raised RuntimeError after its ctx.transaction() committed" in caplog.text


def test_the_task_session_factory_makes_the_session(engine, clean_jobs, effects):
    made = []

    def factory():
        session = sessionmaker(engine)()
        made.append(session)
        return session

    queue = sq.Queue(engine, load_entrypoints=False)
    queue.task(name="write", session_factory=factory)(write_in_transaction)
    job_id = queue.enqueue("write", {"note": "factory"})
    queue.worker(**FAST).run(until_empty=True)

    assert len(made) == 1 and effects(job_id) == [(job_id, "factory")]
    assert queue.get_job(job_id).status is sq.JobStatus.COMPLETED


@pytest.mark.parametrize("with_factory", [False, True], ids=["queue-engine", "async_sessionmaker"])
def test_async_handlers_use_async_with(database_url, clean_jobs, effects, with_factory):
    url = database_url.replace("postgresql://", "postgresql+psycopg://")
    async_engine = create_async_engine(url)
    queue = sq.Queue(url, load_entrypoints=False)
    factory = async_sessionmaker(async_engine) if with_factory else None

    @queue.task(name="write", session_factory=factory)
    async def write(payload, ctx):
        async with ctx.transaction() as session:
            await session.execute(INSERT, {"job_id": ctx.job_id, "note": payload["note"]})
            ctx.set_result("async")

    job_id = queue.enqueue("write", {"note": "async"})
    summary = queue.worker(**FAST).run(until_empty=True)

    assert summary.completed == 1
    assert (queue.get_job(job_id).status, queue.get_job(job_id).result) == (sq.JobStatus.COMPLETED, "async")
    assert effects(job_id) == [(job_id, "async")]
    queue.engine.dispose()


def test_misuse_is_refused_with_a_clear_error(engine, clean_jobs, effects):
    queue = sq.Queue(engine, load_entrypoints=False)
    errors: dict[str, str] = {}

    @queue.task(name="misuse")
    def misuse(payload, ctx):
        for name, attempt in (("set_result outside", lambda: ctx.set_result(1)),
                              ("nested", lambda: nested(ctx))):
            try:
                attempt()
            except (RuntimeError, sq.ConfigurationError) as exc:
                errors[name] = str(exc)
        with ctx.transaction():
            pass
        try:
            with ctx.transaction():
                pass
        except RuntimeError as exc:
            errors["twice"] = str(exc)

    def nested(ctx):
        with ctx.transaction():
            with ctx.transaction():
                pass

    job_id = queue.enqueue("misuse", {})
    [claimed] = queue.claim(worker_id="w", limit=1)
    ran = run_claimed_job(queue.core, claimed)

    assert "belongs inside that block" in errors["set_result outside"]
    assert "do not nest" in errors["nested"]
    assert "once per run (an earlier block committed)" in errors["twice"]
    assert ran.outcome == "completed" and effects() == []
    assert queue.get_job(job_id).status is sq.JobStatus.COMPLETED

    with pytest.raises(RuntimeError, match="built by hand"):
        claimed.context().transaction()
    with pytest.raises(sq.ConfigurationError, match="session_factory of task 'bad'"):
        queue.task(name="bad", session_factory="not callable")(write_in_transaction)


def test_with_on_an_async_session_factory_is_refused(engine, database_url, clean_jobs, effects):
    async_engine = create_async_engine(database_url.replace("postgresql://", "postgresql+psycopg://"))
    queue = sq.Queue(engine, load_entrypoints=False)
    queue.task(name="write", session_factory=async_sessionmaker(async_engine),
               max_attempts=1)(write_in_transaction)
    job_id = queue.enqueue("write", {"note": "x"})
    [claimed] = queue.claim(worker_id="w", limit=1)

    ran = run_claimed_job(queue.core, claimed)

    assert ran.outcome == "failed" and isinstance(ran.error, sq.ConfigurationError)
    assert "needs a Session (a sessionmaker)" in str(ran.error) and "AsyncSession" in str(ran.error)
    assert queue.get_job(job_id).status is sq.JobStatus.FAILED and effects() == []


def test_async_with_on_a_queue_without_an_asyncio_engine_names_the_fix(engine, clean_jobs, effects):
    queue = sq.Queue(engine, load_entrypoints=False)

    @queue.task(name="write", max_attempts=1)
    async def write(payload, ctx):
        async with ctx.transaction() as session:
            await session.execute(INSERT, {"job_id": ctx.job_id, "note": "x"})

    queue.enqueue("write", {})
    [claimed] = queue.claim(worker_id="w", limit=1)
    ran = run_claimed_job(queue.core, claimed)

    assert ran.outcome == "failed" and "async_sessionmaker" in str(ran.error)
    assert effects() == []


class Base(DeclarativeBase):
    pass


class Effect(Base):
    __tablename__ = "handler_effects"
    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int | None]
    note: Mapped[str | None]


def test_objects_written_in_the_block_stay_readable_after_it(engine, clean_jobs, effects):
    """The default session does not expire them at commit: the handler may use what it wrote
    (to send the mail, say) once the block has committed."""
    queue = sq.Queue(engine, load_entrypoints=False)
    after: list[tuple] = []

    @queue.task(name="write")
    def write(payload, ctx):
        with ctx.transaction() as session:
            effect = Effect(job_id=ctx.job_id, note="orm")
            session.add(effect)
        after.append((effect.id, effect.note))  # the session is closed by now

    job_id = queue.enqueue("write", {})
    [claimed] = queue.claim(worker_id="w", limit=1)
    assert run_claimed_job(queue.core, claimed).outcome == "completed"
    assert after[0][1] == "orm" and after[0][0] is not None
    assert effects(job_id) == [(job_id, "orm")]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_handler_running_on_after_its_commit_is_neither_lost_nor_cancelled(database_url, clean_jobs,
                                                                           effects, kind):
    """Mark the order, then send the mail: after the block the job is completed, so the lease
    keeper's renewals (every 0.5 s here) must leave it alone instead of reporting a lost claim
    and cancelling the coroutine that is still sending."""
    queue = sq.Queue(database_url, load_entrypoints=False)
    finished: list[str] = []

    if kind == "sync":
        @queue.task(name="mark_then_mail")
        def handler(payload, ctx):
            write_in_transaction({"note": "marked"}, ctx)
            time.sleep(1.6)  # three renewals
            finished.append("mailed")
    else:
        @queue.task(name="mark_then_mail")
        async def handler(payload, ctx):
            async with ctx.transaction() as session:
                await session.execute(INSERT, {"job_id": ctx.job_id, "note": "marked"})
            await asyncio.sleep(1.6)
            finished.append("mailed")

    job_id = queue.enqueue("mark_then_mail", {})
    summary = queue.worker(poll_interval=0.05, lease=1.5).run(until_empty=True)

    assert finished == ["mailed"]
    assert (summary.completed, summary.lost) == (1, 0)
    assert queue.get_job(job_id).status is sq.JobStatus.COMPLETED
    assert effects(job_id) == [(job_id, "marked")]
    queue.engine.dispose()


def test_the_run_reports_the_result_stored_with_the_completion(engine, clean_jobs, effects):
    queue = sq.Queue(engine, load_entrypoints=False)

    @queue.task(name="write")
    def write(payload, ctx):
        write_in_transaction({"note": "r"}, ctx)
        return "returned after the commit, not stored"

    job_id = queue.enqueue("write", {})
    [claimed] = queue.claim(worker_id="w", limit=1)
    ran = run_claimed_job(queue.core, claimed)
    assert ran.result == {"wrote": "r"} == queue.get_job(job_id).result


def test_a_claim_the_lease_keeper_found_lost_is_reported_once(engine, clean_jobs, effects, events):
    """The worker's lease renewal finds the claim gone while the handler is inside its block;
    the block then ends in LostClaimError without a second lost-claim report."""
    seen, recorder = events
    queue = sq.Queue(engine, load_entrypoints=False, plugins=[recorder])
    inside, leave = threading.Event(), threading.Event()
    raised: list[BaseException] = []

    @queue.task(name="write")
    def write(payload, ctx):
        try:
            with ctx.transaction() as session:
                session.execute(INSERT, {"job_id": ctx.job_id, "note": "stale"})
                inside.set()
                leave.wait(30)
        except sq.LostClaimError as exc:
            raised.append(exc)
            raise

    job_id = queue.enqueue("write", {})
    worker = queue.worker(poll_interval=0.05, lease=1.5, concurrency=1)
    thread = threading.Thread(target=worker.run, kwargs={"until_empty": True})
    thread.start()
    try:
        assert inside.wait(30)
        with engine.begin() as conn:  # recovered and claimed by another worker meanwhile
            conn.execute(text("UPDATE sqla_queue_jobs SET claim_token = 'other-token', locked_by = 'other', "
                              "locked_at = now()"))
        deadline = time.monotonic() + 30
        while not any(kind == "lost" for kind, _ in seen) and time.monotonic() < deadline:
            time.sleep(0.05)  # the next renewal (every 0.5 s) finds the claim gone
    finally:
        leave.set()
        thread.join(60)

    assert [type(e) for e in raised] == [sq.LostClaimError]
    lost = [(e.job_id, e.operation) for kind, e in seen if kind == "lost"]
    assert lost == [(job_id, "heartbeat")]
    assert (worker.summary.lost, worker.summary.completed) == (1, 0)
    assert effects() == [] and queue.get_job(job_id).locked_by == "other"
    assert queue.complete(job_id, "other-token")


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_commit_inside_the_block_is_refused_and_nothing_is_written(database_url, clean_jobs, effects, kind):
    """D5: ``session.commit()`` in the block once committed the writes ahead of the fenced
    completion, so a stale run's writes persisted. Now it fails the attempt and writes nothing."""
    queue = sq.Queue(database_url, load_entrypoints=False)

    if kind == "sync":
        @queue.task(name="eager", max_attempts=1)
        def eager(payload, ctx):
            with ctx.transaction() as session:
                session.execute(INSERT, {"job_id": ctx.job_id, "note": "early"})
                session.commit()
    else:
        @queue.task(name="eager", max_attempts=1)
        async def eager(payload, ctx):
            async with ctx.transaction() as session:
                await session.execute(INSERT, {"job_id": ctx.job_id, "note": "early"})
                await session.commit()

    job_id = queue.enqueue("eager", {})
    try:
        summary = queue.worker(**FAST).run(until_empty=True)
    finally:
        asyncio.run(queue.dispose_async())
        queue.engine.dispose()

    assert summary.failed == 1
    assert effects(job_id) == []
    observer = sq.Queue(database_url, load_entrypoints=False)
    job = observer.get_job(job_id)
    assert job.status is sq.JobStatus.FAILED and "session.commit() inside ctx.transaction()" in job.last_error
    observer.engine.dispose()


@pytest.mark.parametrize("ending", ["rollback", "close"])
def test_a_session_ended_inside_the_block_does_not_complete_the_job(engine, clean_jobs, effects, ending):
    """A rollback or close inside the block threw the writes away: completing the job after it
    would record the work done without them."""
    queue = sq.Queue(engine, load_entrypoints=False)

    @queue.task(name="undo", max_attempts=1)
    def undo(payload, ctx):
        with ctx.transaction() as session:
            session.execute(INSERT, {"job_id": ctx.job_id, "note": "lost"})
            getattr(session, ending)()

    job_id = queue.enqueue("undo", {})
    [claimed] = queue.claim(worker_id="w", limit=1)
    ran = run_claimed_job(queue.core, claimed)

    job = queue.get_job(job_id)
    assert (ran.outcome, job.status) == ("failed", sq.JobStatus.FAILED)
    assert "rolled back or closed inside the block" in job.last_error
    assert effects() == []
