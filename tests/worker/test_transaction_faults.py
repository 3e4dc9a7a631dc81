"""The handler transaction under faults, with real worker processes (the CLI) and real signals.

``ctx.transaction()`` promises exactly-once *state effects* in the database, not exactly-once
execution: the rows a handler writes in its block commit together with the job's token-guarded
completion, or not at all, and a stale claim's writes never commit. The fault app's ``work_tx``
and ``work_tx_async`` handlers record each run in a transaction of their own (runs may repeat),
then write one ``effects`` row inside the block (a table with no unique constraint on the job:
a second committed effect would be counted, never refused).

* SIGKILL storm: 3,000 jobs, half of each kind, 3 workers killed 12 times. Handler runs repeat;
  committed effects do not: exactly one per job, and it is the completing claim's.
* SIGSTOP: a worker frozen inside its block, past its lease, loses the job to another worker;
  resumed, its block ends in ``LostClaimError`` and nothing it wrote exists.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from storm import report, stop_gracefully, storm

JOBS = 3_000
CHUNK = 100  # jobs of one kind per enqueue: the kinds alternate through the whole run
WORKERS = 3
CONCURRENCY = 4
KILLS = 12
TASKS = ("work_tx", "work_tx_async")  # the fault app's two handler-transaction kinds
FIGURES = Path("/tmp/sqla_queue_crash_figures_transaction.txt")
WORKER_OPTIONS = ("--concurrency", str(CONCURRENCY), "--lease", "3", "--poll-interval", "0.2")

LEASE = 2.0
FROZEN_OPTIONS = ("--concurrency", "2", "--lease", str(LEASE), "--poll-interval", "0.2")


@pytest.mark.slow
def test_sigkill_storm_commits_exactly_one_effect_per_job(fault_app, session_app_url):
    app = fault_app(session_app_url, "transaction")
    for chunk in range(JOBS // CHUNK):  # >= 12.5 s of work for 12 slots: the kills land mid-run
        # The handler sleeps 50 ms inside its block, after its write: most kills find a block open.
        app.enqueue(CHUNK, sleep=0.05, task=TASKS[chunk % 2])
    figures, completed_at_kill, running = storm(app, jobs=JOBS, workers=WORKERS, concurrency=CONCURRENCY,
                                                kills=KILLS, options=WORKER_OPTIONS)
    # Some kills caught a handler run: without repeated runs this test would prove nothing.
    assert figures["handler_runs"] > JOBS, figures
    figures.update(app.check_effects(JOBS))
    assert figures["duplicate_effects"] == 0
    figures.update(
        blocks_ended_by_an_error=app.scalar("SELECT count(*) FROM handler_notes"),
        **{f"effects_{task}": count for task, count in app.query(
            "SELECT j.task, count(*) FROM effects e JOIN sqla_queue_jobs j ON j.id = e.job_id "
            "GROUP BY j.task ORDER BY j.task")},
    )
    stop_gracefully(app, running)
    report("handler transaction crash figures", figures, completed_at_kill, FIGURES)


# Where the frozen run is caught, and how its block may end once it runs again:
# * `rescued`: the other worker has "completed" the job, or is still "running" it, held inside
#   its own block on its own gate (the stale run then finds the job running under a newer
#   claim: only the claim token tells them apart).
# * `gate_opens`: the frozen handler finds its gate open on SIGCONT and leaves its block (the
#   fenced completion), or finds it still closed and keeps awaiting inside its block.
# * sync handler, gate open: the thread reaches the block's end; the completion matches no row:
#   LostClaimError. (A thread cannot be stopped, so a sync block with its gate closed would hold
#   its slot for ever: not a case.)
# * async, gate closed: only the worker can end the block. Its lease keeper finds the claim lost
#   (renewal) or fences it, and cancels the coroutine: CancelledError.
# * async, gate open: a race between the block's end (LostClaimError) and the lease keeper's
#   cancel (CancelledError), both right after SIGCONT; either way nothing commits.
FROZEN_CASES = [
    pytest.param("transaction", "completed", True, {"LostClaimError"}, id="sync-after-the-rescue"),
    pytest.param("transaction", "running", True, {"LostClaimError"}, id="sync-during-the-rescue"),
    pytest.param("transaction_async", "running", True, {"LostClaimError", "CancelledError"},
                 id="async-during-the-rescue"),
    pytest.param("transaction_async", "completed", False, {"CancelledError"}, id="async-still-awaiting"),
]
JOB = "SELECT status, attempts, locked_by, claim_token, completed_at FROM sqla_queue_jobs WHERE id = :id"


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "rescued", "gate_opens", "endings"), FROZEN_CASES)
def test_frozen_worker_inside_its_block_loses_the_job_and_none_of_its_writes_commit(
    fault_app, session_app_url, tmp_path, kind, rescued, gate_opens, endings
):
    app = fault_app(session_app_url, kind)
    gates = [tmp_path / "gate-1", tmp_path / "gate-2"]
    frozen = app.start_worker(*FROZEN_OPTIONS)
    job_id = app.enqueue_one(hold=gates if rescued == "running" else gates[:1])
    # The handler has written its effect row and noted (in a transaction of its own) that it
    # waits inside its block: freeze it there, transaction open, heartbeat and all.
    [inside] = app.wait_until(lambda: app.notes(job_id), 30, f"the first worker to be inside job {job_id}'s block")
    assert (inside.pid, inside.attempt, inside.note) == (frozen.pid, 1, "inside")
    frozen.signal(signal.SIGSTOP)
    try:
        assert app.effects(job_id) == []  # written, not committed
        rescuer = app.start_worker(*FROZEN_OPTIONS)
        if rescued == "completed":
            app.wait_until(lambda: app.completed() == 1, 10 * LEASE + 20,
                           f"job {job_id} to be recovered and completed by another worker")
        else:
            app.wait_until(lambda: [n for n in app.notes(job_id) if n.pid == rescuer.pid], 10 * LEASE + 20,
                           f"job {job_id} to be recovered and another worker inside its block")
        rescued_row = app.query(JOB, {"id": job_id})[0]
        assert (rescued_row.status, rescued_row.attempts) == (rescued, 2)
        assert f":{rescuer.pid}:" in rescued_row.locked_by
        assert app.effects(job_id) == ([(rescuer.pid, 2, rescued_row.claim_token)] if rescued == "completed" else [])
        if gate_opens:
            gates[0].touch()  # the frozen handler leaves its block as soon as it runs again
    finally:
        frozen.signal(signal.SIGCONT)

    [ended] = app.wait_until(
        lambda: [n for n in app.notes(job_id) if n.pid == frozen.pid and n.note != "inside"],
        10 * LEASE + 20, "the resumed handler's block to end")
    assert ended.claim_token == inside.claim_token
    assert ended.note in endings, app.logs()
    app.wait_until(lambda: f"lost claim on job {job_id}" in frozen.log(), 10 * LEASE,
                   "the resumed worker to report its lost claim")
    # The stale block committed nothing: the job is as the rescuer left it, its effect the rescuer's.
    assert app.query(JOB, {"id": job_id})[0] == rescued_row
    if rescued == "running":
        assert app.effects(job_id) == []
        gates[1].touch()
        app.wait_until(lambda: app.completed() == 1, 30, f"the rescuer to complete job {job_id}")
    finished = app.query(JOB, {"id": job_id})[0]
    assert (finished.status, finished.attempts, finished.claim_token) == ("completed", 2, rescued_row.claim_token)
    assert app.effects(job_id) == [(rescuer.pid, 2, finished.claim_token)]
    assert app.scalar("SELECT count(*) FROM effects WHERE claim_token = :token", {"token": inside.claim_token}) == 0
    assert [run.pid for run in app.runs(job_id)] == [frozen.pid, rescuer.pid]
    assert frozen.alive() and rescuer.alive()
    reports = [line.split(": ", 1)[1] for line in frozen.log().splitlines() if f"lost claim on job {job_id}" in line]
    print(f"\nfrozen {kind} handler, rescuer's job {rescued}, gate {'open' if gate_opens else 'closed'}: "
          f"its block ended with {ended.note}; the frozen worker reported: {reports}")
