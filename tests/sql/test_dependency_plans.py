"""What dependencies cost the statements that finish jobs, and pruning, on a table shaped like
production (many finished jobs, a populated dependencies table), proved with the planner.

A completion of a job nobody depends on (``dependents = 0``, nearly every job) must not read the
dependencies table at all: its reads sit under a one-time gate, so EXPLAIN ANALYZE shows them
never executed. A completion of a job with dependents finds them by index. Pruning checks the
edges only of rows with ``dependents > 0`` and stays on the finished-at index."""

from __future__ import annotations

from datetime import timedelta

import pytest
from plan_helpers import indexes_used, plan_nodes, seq_scanned
from sqlalchemy import create_engine, text

import sqla_queue as sq
from sqla_queue.sql import catalog, complete_and_claim_jobs, complete_job, prune

JOBS = sq.Job.__table__
DEPENDENCIES = "sqla_queue_jobs_dependencies"
DEPENDENCY_INDEXES = {"pk_sqla_queue_jobs_dependencies", "sqla_queue_jobs_dependencies_job_idx"}
LONE, PARENT, CHILD = 200_001, 200_002, 200_003  # a running job without dependents, one with, its dependent


@pytest.fixture(scope="module")
def engine(create_database):
    """100,000 completed jobs, half of them in 50,000 finished edges; a few running jobs (one
    with a waiting dependent); analyzed."""
    engine = create_engine(create_database())
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs (id, queue_name, task, payload, status, attempts, locked_at, completed_at,"
            " dependents) OVERRIDING SYSTEM VALUE SELECT g, 'default', 'send_email', '{}', 'completed', 1,"
            " now() - make_interval(secs => g), now() - make_interval(secs => g), (g % 2 = 1)::int"
            " FROM generate_series(1, 100000) AS g"))
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs_dependencies (depends_on, job_id)"
            " SELECT g, g + 1 FROM generate_series(1, 99999, 2) AS g"))
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs (id, queue_name, task, payload, status, attempts, locked_at,"
            " claim_token, dependents, waiting_on) OVERRIDING SYSTEM VALUE VALUES"
            " (:lone, 'default', 'send_email', '{}', 'running', 1, now(), 't', 0, 0),"
            " (:parent, 'default', 'send_email', '{}', 'running', 1, now(), 't', 1, 0),"
            " (:child, 'default', 'send_email', '{}', 'waiting', 0, NULL, NULL, 0, 1)"), 
            {"lone": LONE, "parent": PARENT, "child": CHILD})
        conn.execute(text("INSERT INTO sqla_queue_jobs_dependencies (depends_on, job_id) VALUES (:p, :c)"),
                     {"p": PARENT, "c": CHILD})
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE sqla_queue_jobs"))
        conn.execute(text("VACUUM ANALYZE sqla_queue_jobs_dependencies"))
    yield engine
    engine.dispose()


def _analyzed(engine, statement, params) -> dict:
    """The statement run under EXPLAIN ANALYZE in a transaction rolled back: its plan with
    what each node did."""
    with engine.connect() as conn:
        [[document]] = conn.execute(catalog.explain(statement, analyze=True), params).all()
        conn.rollback()
    return document[0]["Plan"]


def _dependency_reads(plan: dict) -> list[dict]:
    return [node for node in plan_nodes(plan)
            if node.get("Relation Name") == DEPENDENCIES or node.get("Index Name") in DEPENDENCY_INDEXES]


def _released(plan: dict) -> dict:
    [node] = [n for n in plan_nodes(plan) if n.get("Subplan Name") == "CTE completed_now_released"]
    return node


def _round_params(job_id: int) -> dict:
    return {"job_ids": [job_id], "tokens": ["t"], "results": [None], "queues": ["default"], "limit": 10,
            "worker_id": "w", "token": "x", "lease": timedelta(seconds=60), "tasks": ["send_email"]}


@pytest.mark.parametrize("statement, params", [
    (complete_job(JOBS), {"job_id": LONE, "token": "t", "result": None}),
    (complete_and_claim_jobs(JOBS), _round_params(LONE)),
], ids=["queue.complete", "the worker's round"])
def test_completing_a_job_without_dependents_never_reads_the_dependencies_table(engine, statement, params):
    plan = _analyzed(engine, statement, params)
    reads = _dependency_reads(plan)
    assert reads, "the statement settles dependents: it must have reads of the dependencies table"
    assert {node["Actual Loops"] for node in reads} == {0}, reads
    assert _released(plan)["Actual Rows"] == 0


def test_completing_a_job_with_dependents_finds_them_by_index_and_releases_them(engine):
    plan = _analyzed(engine, complete_job(JOBS), {"job_id": PARENT, "token": "t", "result": None})
    assert _released(plan)["Actual Rows"] == 1
    assert DEPENDENCIES not in seq_scanned(plan) and "sqla_queue_jobs" not in seq_scanned(plan), plan
    assert DEPENDENCY_INDEXES & indexes_used(plan)


def test_pruning_checks_edges_only_for_rows_with_dependents_and_walks_the_finished_index(engine):
    from plan_helpers import plan_of

    plan = plan_of(engine, prune.prune_finished(JOBS, sq.JobStatus.COMPLETED),
                   {"age": timedelta(seconds=0), "limit": 1000})
    assert "sqla_queue_jobs_completed_at_idx" in indexes_used(plan)
    assert "sqla_queue_jobs" not in seq_scanned(plan), plan
    assert not {"Hash Anti Join", "Nested Loop Anti Join", "Merge Anti Join"} & {
        node["Node Type"] + (" " + node["Join Type"] + " Join" if "Join Type" in node else "")
        for node in plan_nodes(plan)}, plan
