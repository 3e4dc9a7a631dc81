"""The chaos checker finds each class of violation, from constructed states and logs: one clean
run as the baseline, then one fault per test. A checker that found nothing would pass a runner
that breaks everything, so each class is shown to be seen."""

from __future__ import annotations

import pytest
from sqlalchemy import insert

from sqla_queue.testing.chaos import events
from sqla_queue.testing.chaos.checker import FAILURE_CLASSES, Observations, Row, classify, observe
from sqla_queue.testing.chaos.enqueuer import call_meta
from sqla_queue.testing.chaos.workload import build_queue, effects, effects_metadata

PLAIN, TRANSACTION = "chaos_plain", "chaos_transaction"


A, B = 101, 102  # worker pids


def clean(**changes) -> Observations:
    """Two jobs enqueued, acknowledged and completed once each; job 2 was claimed twice (worker A
    lost its claim, worker B completed it) and its effect committed once, under B's claim."""
    seen = {
        "rows": {1: Row(1, "completed", 1, PLAIN, n=0, attempt_of_call=1, claim_token="t1"),
                 2: Row(2, "completed", 2, TRANSACTION, n=1, attempt_of_call=1, claim_token="t2b")},
        "effects": {2: ["t2b"]},
        "intents": [(0, 1), (1, 1)],
        "acks": [(0, 1, 1), (1, 1, 2)],
        "claims": [(1, 1, A), (2, 1, A), (2, 2, B)],
        "completions": [(1, 1, A), (2, 2, B)],
    }
    return Observations(**{**seen, **changes})


def found(seen: Observations) -> dict[str, list[int]]:
    return {name: ids for name, ids in classify(seen).classes.items() if ids}


def test_a_clean_run_has_no_class():
    verdict = classify(clean())
    assert found(clean()) == {}
    assert not verdict.failed
    assert verdict.counts() == {name: 0 for name in (*FAILURE_CLASSES, "in_doubt")}


def test_an_acknowledged_job_missing_from_the_table_is_lost():
    seen = clean(acks=[(0, 1, 1), (1, 1, 2), (2, 1, 3)], intents=[(0, 1), (1, 1), (2, 1)])
    assert found(seen) == {"lost": [3]}
    assert classify(seen).failed


@pytest.mark.parametrize("status", ["pending", "running"])
def test_a_job_not_terminal_after_the_heal_is_stuck(status):
    seen = clean(rows={**clean().rows, 1: Row(1, status, 1, PLAIN, 0, 1)}, completions=[(2, 2, B)])
    assert found(seen) == {"stuck": [1]}


@pytest.mark.parametrize("completions, job, why", [
    ([(1, 1, A), (1, 1, A), (2, 2, B)], 1, "the same claim's completion accepted twice"),
    ([(1, 1, A), (2, 1, A), (2, 2, B)], 2, "two claims' completions accepted"),
    ([(1, 1, A), (2, 1, A)], 2, "a stale claim's completion accepted while the last claim held the job"),
    ([(1, 1, A), (2, 2, A)], 2, "a completion by a process that never held that claim (the row's attempt)"),
])
def test_a_completion_accepted_twice_or_from_a_stale_claim_is_duplicated(completions, job, why):
    assert found(clean(completions=completions)) == {"duplicated": [job]}, why


def test_an_effect_committed_under_a_stale_claim_is_duplicated():
    """Worker A's transaction committed job 2's effect after B had claimed it: one effect, but
    not the last claim's."""
    assert found(clean(effects={2: ["t2a"]})) == {"duplicated": [2]}


def test_a_completion_accepted_for_a_job_that_did_not_stay_completed_is_duplicated():
    seen = clean(rows={**clean().rows, 1: Row(1, "failed", 1, PLAIN, 0, 1)})
    assert found(seen) == {"duplicated": [1]}


def test_a_handler_that_ran_twice_is_not_a_duplicate():
    """At-least-once: job 2 was claimed twice (attempt 2 is its last), completed once."""
    assert found(clean()) == {}


def test_two_committed_effects_of_one_job_are_a_duplicate_effect():
    assert found(clean(effects={2: ["t2b", "t2b"]})) == {"duplicate_effects": [2]}


def test_a_completed_transaction_job_without_its_effect_is_reported():
    assert found(clean(effects={})) == {"missing_effects": [2]}


def test_a_row_no_call_made_is_unexpected():
    rows = {**clean().rows, 3: Row(3, "completed", 1, PLAIN, n=5, attempt_of_call=1),
            4: Row(4, "completed", 1, PLAIN, n=None, attempt_of_call=None)}
    assert found(clean(rows=rows, completions=[(1, 1, A), (2, 2, B)])) == {"unexpected": [3, 4]}


def test_a_row_whose_call_was_acknowledged_with_another_id_is_unexpected():
    """The call for item 1 returned job 2 (say, an idempotency key's holder), yet job 3 carries
    that same call: it inserted a row and reported another."""
    rows = {**clean().rows, 3: Row(3, "completed", 1, PLAIN, n=1, attempt_of_call=1)}
    assert found(clean(rows=rows)) == {"unexpected": [3]}


def test_a_row_of_a_call_that_never_returned_is_in_doubt_not_a_failure():
    rows = {**clean().rows, 3: Row(3, "completed", 1, PLAIN, n=2, attempt_of_call=1)}
    seen = clean(rows=rows, intents=[(0, 1), (1, 1), (2, 1)])
    assert found(seen) == {"in_doubt": [3]}
    assert not classify(seen).failed


def test_observe_reads_the_table_the_effects_and_both_logs(own_database, tmp_path):
    """The same classes from a real database and real log files: a completed transaction job
    with two effects (one under a stale token) and its completion accepted twice, a job left
    running (its call never acknowledged), and an acknowledged id that does not exist."""
    _, engine = own_database
    effects_metadata.create_all(engine)
    trace, enqueues = tmp_path / "events.jsonl", tmp_path / "enqueues.jsonl"
    queue = build_queue(engine, str(trace))
    done = queue.enqueue(TRANSACTION, {}, meta=call_meta(0, 1))
    left = queue.enqueue(PLAIN, {}, meta=call_meta(1, 1))
    claimed = {job.id: job for job in queue.claim(worker_id="checker-test", limit=2)}
    assert queue.complete(done, claimed[done].claim_token)
    with engine.begin() as conn:
        conn.execute(insert(effects), [{"job_id": done, "attempt": 1, "claim_token": claimed[done].claim_token},
                                       {"job_id": done, "attempt": 1, "claim_token": "stale"}])
    for event, fields in [("intent", {"n": 0, "attempt": 1}), ("ack", {"n": 0, "attempt": 1, "job": done}),
                          ("intent", {"n": 1, "attempt": 1}), ("intent", {"n": 2, "attempt": 1}),
                          ("ack", {"n": 2, "attempt": 1, "job": left + 1000})]:
        events.append(enqueues, event, **fields)
    events.append(trace, "claimed", job=done, attempt=1)
    events.append(trace, "completed", job=done, attempt=1)
    events.append(trace, "completed", job=done, attempt=1)
    with open(trace, "a") as cut:
        cut.write('{"event": "completed", "jo')  # a process killed inside its write

    assert found(observe(engine, trace, enqueues)) == {
        "lost": [left + 1000], "stuck": [left], "duplicated": [done], "duplicate_effects": [done],
        "in_doubt": [left],
    }
