"""The claim as PostgreSQL plans it: on a large, mostly finished table it must walk the pending
partial index, with a custom plan and with a generic (prepared, parameter-blind) plan alike."""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from plan_helpers import indexes_used, plan_nodes, plan_of, seq_scanned
from sqlalchemy import Engine, create_engine, event, text

import sqla_queue as sq
from sqla_queue import sql
from sqla_queue.db.worker_engine import worker_engine
from sqla_queue.sql import lease as lease_sql
from sqla_queue.sql import outcome as outcome_sql
from sqla_queue.worker import worker as worker_module

JOBS = sq.Job.__table__
INDEX = "sqla_queue_jobs_pending_claim_idx"
CLAIM_PARAMS = {"queue": "default", "worker_id": "plan-test", "limit": 10, "token": "t", "lease": sq.DEFAULT_LEASE}


def _analyzed_database(create_database, *inserts: str, vacuum: bool = False) -> Engine:
    """An engine on a database of its own, its job table filled by `inserts` and analyzed."""
    engine = create_engine(create_database())
    with engine.begin() as conn:
        for insert in inserts:
            conn.execute(text(insert))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(("VACUUM " if vacuum else "") + "ANALYZE sqla_queue_jobs"))
    return engine


@pytest.fixture(scope="module")
def big_engine(create_database):
    """Its own database: 100,000 completed jobs and a few hundred pending ones, analyzed."""
    engine = _analyzed_database(
        create_database,
        "INSERT INTO sqla_queue_jobs (queue_name, task, payload, status, attempts, run_at,"
        " locked_at, completed_at)"
        " SELECT CASE WHEN g % 3 = 0 THEN 'images' ELSE 'default' END, 'send_email',"
        " jsonb_build_object('n', g), 'completed', 1, now() - make_interval(secs => g),"
        " now(), now() FROM generate_series(1, 100000) AS g",
        "INSERT INTO sqla_queue_jobs (queue_name, task, payload, run_at)"
        " SELECT CASE WHEN g % 2 = 0 THEN 'images' ELSE 'default' END, 'send_email',"
        " '{}'::jsonb, now() + make_interval(secs => g - 200) FROM generate_series(1, 400) AS g",
    )
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
def sent_claim(big_engine):
    """The claim statement and parameters exactly as SQLAlchemy hands them to psycopg.

    Captured by running the real claim (built by sqla_queue.sql.claim_jobs) in a transaction
    that is rolled back.
    """
    return _sent(big_engine, sql.claim_jobs(sq.Job.__table__), CLAIM_PARAMS)


def _plan(big_engine, statement: str, params) -> str:
    with big_engine.connect() as conn:
        cursor = conn.connection.driver_connection.cursor()
        cursor.execute("EXPLAIN " + statement, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        conn.rollback()
    return plan


def test_the_status_predicate_is_sent_as_a_literal_not_a_parameter(sent_claim):
    statement, params = sent_claim
    assert "status = 'pending'" in statement
    assert "pending" not in params.values()


def test_claim_plan_uses_the_pending_partial_index(big_engine, sent_claim):
    statement, params = sent_claim
    plan = _plan(big_engine, statement, params)
    assert INDEX in plan, plan
    assert "Seq Scan" not in plan, plan


def test_generic_claim_plan_still_uses_the_pending_partial_index(big_engine, sent_claim):
    """A prepared statement's generic plan knows no parameter values: only a literal status
    lets the planner prove the partial index's predicate. The control (the same claim with
    ``status = $n``) shows the test would notice a parameterized status."""
    statement, params = sent_claim
    prepared, names = _positional(statement)
    values = [params[name] for name in names]
    control = prepared.replace("status = 'pending'", f"status = ${len(names) + 1}")

    literal_plan = _generic_plan(big_engine, prepared, values)
    parameter_plan = _generic_plan(big_engine, control, [*values, "pending"])

    assert "$" in literal_plan  # really the generic plan: the queue name is still a parameter
    assert INDEX in literal_plan, literal_plan
    assert INDEX not in parameter_plan, parameter_plan


def _positional(statement: str) -> tuple[str, list[str]]:
    """psycopg's ``%(name)s`` placeholders as PostgreSQL's ``$n``, and the names in order."""
    names: list[str] = []

    def number(match: re.Match) -> str:
        names.append(match.group(1))
        return f"${len(names)}"

    return re.sub(r"%\((\w+)\)s", number, statement), names


def _generic_plan(big_engine, prepared: str, values: list) -> str:
    with big_engine.connect() as conn:
        cursor = conn.connection.driver_connection.cursor()
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE generic_claim AS {prepared}")
        cursor.execute(f"EXPLAIN EXECUTE generic_claim({', '.join(map(_sql_literal, values))})")
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("DEALLOCATE generic_claim")
        conn.rollback()
    return plan


def _sql_literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):  # an array literal: NULL elements, timestamps quoted
        return "'{" + ",".join(_array_element(v) for v in value) + "}'"
    if isinstance(value, datetime):
        return f"'{value.isoformat()}'"
    return "'" + str(value).replace("'", "''") + "'"


def _array_element(value) -> str:
    if value is None:
        return "NULL"
    return f'"{value.isoformat()}"' if isinstance(value, datetime) else str(value)


# -- priorities in use: a large backlog, several priorities ---------------------------------------

PRIORITIES = (-1, 0, 5, 10)


@pytest.fixture(scope="module")
def priorities_engine(create_database):
    """Its own database: 240,000 pending jobs over two queues at priorities -1, 0, 5 and 10 (each
    priority's jobs spread over the same hour of run_at, all due), beside 60,000 completed ones;
    vacuumed and analyzed."""
    engine = create_engine(create_database())
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs (queue_name, task, payload, status, attempts, run_at,"
            " locked_at, completed_at)"
            " SELECT 'default', 'send_email', '{}'::jsonb, 'completed', 1, now() - interval '1 day',"
            " now(), now() FROM generate_series(1, 60000) AS g"
        ))
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs (queue_name, task, payload, run_at, priority)"
            " SELECT CASE WHEN mod(g, 2) = 0 THEN 'images' ELSE 'default' END, 'send_email',"
            " jsonb_build_object('n', g), now() - interval '1 hour' + make_interval(secs => g * 0.015),"
            " (CAST(:priorities AS smallint[]))[1 + mod(g / 2, 4)] FROM generate_series(1, 240000) AS g"
        ), {"priorities": list(PRIORITIES)})
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE sqla_queue_jobs"))
    yield engine
    engine.dispose()


def _assert_claim_walks_the_index(plan: dict) -> None:
    nodes = [node["Node Type"] for node in plan_nodes(plan)]
    assert INDEX in indexes_used(plan), plan
    assert not {"Sort", "Incremental Sort"} & set(nodes), nodes
    # The dependencies table is empty here, so its reads plan as scans; they sit under a one-time
    # gate that no completion without dependents opens (tests/sql/test_dependency_plans.py).
    assert seq_scanned(plan) - {"sqla_queue_jobs_dependencies"} == set(), plan


def test_the_large_table_has_what_the_plan_tests_need(priorities_engine):
    with priorities_engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT priority, count(*) FROM sqla_queue_jobs WHERE status = 'pending' GROUP BY priority"
        )).all()
    assert dict(rows) == {p: 60_000 for p in PRIORITIES}


def test_claim_with_priorities_in_use_walks_the_index_in_claim_order(priorities_engine):
    plan = plan_of(priorities_engine, sql.claim_jobs(JOBS), CLAIM_PARAMS)
    _assert_claim_walks_the_index(plan)


@pytest.fixture(scope="module")
def position(priorities_engine) -> dict:
    """A worker's claim position well into priority 0 of queue ``default``: a real pending job's
    ``(priority, run_at, id)``."""
    with priorities_engine.connect() as conn:
        run_at, job_id = conn.execute(text(
            "SELECT run_at, id FROM sqla_queue_jobs WHERE queue_name = 'default' AND status = 'pending'"
            " AND priority = 0 ORDER BY run_at, id OFFSET 10000 LIMIT 1"
        )).one()
    return {"from_priority": 0, "from_run_at": run_at, "from_id": job_id}


# The worker's round: both queues served (``default`` has a position when there is one,
# ``images`` none), only the worker's tasks; nothing finished.
ROUND_PARAMS = {**CLAIM_PARAMS, "queues": ["default", "images"], "tasks": ["send_email", "resize"],
                "job_ids": [], "tokens": [], "results": []}


def _round_positions(position: dict) -> dict:
    """`position` for ``default``, none for ``images``: one list per parameter, as the worker
    sends them."""
    return {key: [value, None] for key, value in position.items()}


@pytest.mark.parametrize("from_position", [False, True], ids=["from the start", "from a position"])
def test_the_workers_round_with_priorities_in_use_walks_the_index_in_claim_order(
    priorities_engine, position, from_position
):
    statement = sql.complete_and_claim_jobs(JOBS, from_position=from_position)
    params = {**ROUND_PARAMS, **(_round_positions(position) if from_position else {})}
    plan = plan_of(priorities_engine, statement, params)
    _assert_claim_walks_the_index(plan)
    scans = [node for node in plan_nodes(plan) if node.get("Index Name") == INDEX]
    # Each queue's read: the queue an index condition from the served list, as is the position.
    assert all("= served.queue_name" in scan["Index Cond"] for scan in scans), scans
    if from_position:  # the scan starts at the position: an index condition, not a filter
        [scan] = [node for node in scans if "priority = " in node["Index Cond"]]
        assert "ROW(run_at, id) >= ROW(served.from_run_at, served.from_id)" in scan["Index Cond"], scan
        # the read from the head runs only for a queue without a position
        gates = [node for node in plan_nodes(plan) if "One-Time Filter" in node]
        assert any("served.from_priority IS NULL" in node["One-Time Filter"] for node in gates), plan
        # the higher and the lower priorities: further ranges of the index, not filters
        for around in ("priority > served.from_priority", "priority < served.from_priority"):
            assert any(around in scan["Index Cond"] for scan in scans), (around, scans)


def test_the_workers_round_stops_reading_once_it_has_its_limit(priorities_engine):
    """The outer LIMIT over the nested loop of served queues: run, the round reads (and locks)
    rows of the first queue only when that queue fills the limit; the second queue's read never
    starts. Rolled back: nothing is claimed."""
    text_sent, params_sent = _sent(priorities_engine, sql.complete_and_claim_jobs(JOBS), ROUND_PARAMS)
    with priorities_engine.connect() as conn:
        cursor = conn.connection.driver_connection.cursor()
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + text_sent, params_sent)
        [[document]] = cursor.fetchall()
        conn.rollback()
    plan = document[0]["Plan"]
    scans = [node for node in plan_nodes(plan) if node.get("Index Name") == INDEX]
    assert [scan["Actual Loops"] for scan in scans] == [1], scans
    assert scans[0]["Actual Rows"] == CLAIM_PARAMS["limit"], scans


@pytest.mark.parametrize("from_position", [False, True], ids=["from the start", "from a position"])
def test_the_workers_prepared_round_keeps_the_index_in_its_generic_plan(priorities_engine, position, from_position):
    """The worker's round runs as a prepared statement, whose generic plan knows neither the
    queues, nor the positions' priority and run_at: it must still walk the index in order."""
    statement = sql.complete_and_claim_jobs(JOBS, from_position=from_position)
    params = {**ROUND_PARAMS, **(_round_positions(position) if from_position else {})}
    text_sent, params_sent = _sent(priorities_engine, statement, params)
    prepared, names = _positional(text_sent)

    plan = _generic_plan(priorities_engine, prepared, [params_sent[name] for name in names])

    assert "$" in plan  # the generic plan: parameters still unknown
    assert INDEX in plan, plan
    # Only the (empty, gated) dependencies table may plan as a scan: tests/sql/test_dependency_plans.py
    assert "Sort" not in plan and "Seq Scan" not in plan.replace("Seq Scan on sqla_queue_jobs_dependencies", ""), plan


@pytest.fixture(scope="module")
def middling_engine(create_database):
    """Its own database: 3,000 pending jobs, vacuumed and analyzed: a job table small enough
    that hashing all of it looks cheap to the planner."""
    engine = _analyzed_database(
        create_database,
        "INSERT INTO sqla_queue_jobs (queue_name, task, payload, run_at)"
        " SELECT 'default', 'send_email', '{}'::jsonb, now() - make_interval(secs => g)"
        " FROM generate_series(1, 3000) AS g",
        vacuum=True,
    )
    yield engine
    engine.dispose()


@pytest.mark.parametrize("statement", ["claim", "round"])
def test_the_claim_updates_its_rows_by_primary_key_on_a_middling_table(middling_engine, statement):
    """Joined to the locking CTE, the claim's UPDATE hashed the whole table (a sequential scan
    per claim) whenever the table looked small next to the batch; from the CTE's ids as an array
    it looks each one up in the primary key (`sql.claim.by_id_from`), in the generic plan too."""
    built = sql.claim_jobs(JOBS) if statement == "claim" else sql.complete_and_claim_jobs(JOBS)
    params = {**(CLAIM_PARAMS if statement == "claim" else ROUND_PARAMS), "limit": 90}
    text_sent, params_sent = _sent(middling_engine, built, params)
    prepared, names = _positional(text_sent)

    plan = _generic_plan(middling_engine, prepared, [params_sent[name] for name in names])

    assert "Index Cond: (id = ANY (" in plan and "pk_sqla_queue_jobs" in plan, plan
    # The gated dependencies CTEs (never run without dependents) may hash their own small table.
    assert "Seq Scan on sqla_queue_jobs " not in plan and "Seq Scan on sqla_queue_jobs\n" not in plan, plan


def _sent(engine, statement, params) -> tuple[str, dict]:
    """`statement`'s SQL text and parameters as SQLAlchemy hands them to psycopg (run, then
    rolled back)."""
    captured = []
    with engine.connect() as conn:
        listener = lambda c, cursor, stmt, sent, ctx, many: captured.append((stmt, sent))
        event.listen(conn, "before_cursor_execute", listener)
        try:
            conn.execute(statement, params).all()
        finally:
            event.remove(conn, "before_cursor_execute", listener)
            conn.rollback()
    [(text_sent, params_sent)] = captured
    return text_sent, params_sent


# -- completing held jobs after a long drain ------------------------------------------------------


@pytest.fixture(scope="module")
def drained_engine(create_database):
    """Its own database in the middle of a drain: vacuumed and analyzed while 10 jobs ran and
    20,000 waited, then those 20,000 claimed and completed in batches with no VACUUM or ANALYZE
    since (autovacuum off for the table), as between two autovacuum runs. Every claim left a
    dead entry in the running-jobs indexes, which the statistics still think are tiny."""
    engine = create_engine(create_database())
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE sqla_queue_jobs SET (autovacuum_enabled = false)"))
        conn.execute(text(
            "INSERT INTO sqla_queue_jobs (queue_name, task, payload, status, attempts, locked_at,"
            " lease_expires_at, claim_token)"
            " SELECT 'default', 'send_email', '{}'::jsonb,"
            " CASE WHEN g > 20000 THEN 'running' ELSE 'pending' END, 1, clock_timestamp(),"
            " clock_timestamp() + interval '5 minutes', 'held-' || g"
            " FROM generate_series(1, 20010) AS g"
        ))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE sqla_queue_jobs"))
        for first in range(1, 20001, 1000):
            batch = {"first": first, "last": first + 999}
            conn.execute(text("UPDATE sqla_queue_jobs SET status = 'running', locked_at = clock_timestamp(),"
                              " lease_expires_at = clock_timestamp() + interval '5 minutes'"
                              " WHERE id BETWEEN :first AND :last"), batch)
            conn.execute(text("UPDATE sqla_queue_jobs SET status = 'completed', completed_at = now()"
                              " WHERE id BETWEEN :first AND :last"), batch)
    yield engine
    engine.dispose()


HELD = {"job_ids": list(range(20001, 20011)), "tokens": [f"held-{n}" for n in range(20001, 20011)],
        "results": [None] * 10}


RUNNING_INDEXES = ("sqla_queue_jobs_running_unleased_idx", "sqla_queue_jobs_running_expiry_idx")
PRIMARY_KEY = "pk_sqla_queue_jobs"

# Every statement that finds held jobs from (id, token) pairs, the CTE (or none) where it updates
# them, and its parameters beyond the pairs.
BY_PAIRS = {
    "the round": (lambda: sql.complete_and_claim_jobs(JOBS), "CTE completed_now",
                  {**CLAIM_PARAMS, "queues": ["default"], "tasks": None, **HELD}),
    "complete_many": (lambda: outcome_sql.complete_jobs_announced(JOBS), "CTE completed_now", HELD),
    "renew": (lambda: lease_sql.renew_leases(JOBS), None, {**HELD, "lease": sq.DEFAULT_LEASE}),
    "release": (lambda: lease_sql.release_jobs(JOBS), None, {**HELD, "reason": lease_sql.RELEASED}),
}


def _finding_part(plan_text: str, cte: str | None) -> str:
    return plan_text if cte is None else plan_text.split(cte, 1)[1].split("CTE ", 1)[0]


@pytest.mark.parametrize("name", list(BY_PAIRS))
@pytest.mark.parametrize("generic", [False, True], ids=["custom plan", "generic plan"])
def test_held_jobs_are_found_by_primary_key_not_through_the_running_index(drained_engine, name, generic):
    """The running-jobs indexes keep an entry for every job claimed since the last VACUUM: a plan
    that finds the held rows through one of them (PostgreSQL 18 makes a skip scan of
    ``id = ANY(...)`` there) walks every dead entry on every round, and a long drain slows down
    as it goes. Each held row must be a primary-key lookup, in the custom and the generic plan."""
    build, cte, params = BY_PAIRS[name]
    text_sent, params_sent = _sent(drained_engine, build(), params)
    if generic:
        prepared, names = _positional(text_sent)
        plan = _generic_plan(drained_engine, prepared, [params_sent[n] for n in names])  # forced generic
    else:
        plan = _plan(drained_engine, text_sent, params_sent)
    part = _finding_part(plan, cte)
    assert PRIMARY_KEY in part, plan
    assert not [index for index in RUNNING_INDEXES if index in part], plan


def _plans_of_the_prepared_round(engine) -> tuple[int, int]:
    """Run the round (finding nothing: no token matches, no claim) until psycopg has prepared
    it and the server has run the prepared statement several times; its generic and custom
    plan counts."""
    params = {**CLAIM_PARAMS, "queues": ["default"], "tasks": None, "limit": 0, "job_ids": HELD["job_ids"],
              "tokens": ["nobody"] * 10,
              "results": HELD["results"]}
    with engine.connect() as conn:
        for _ in range(12):
            conn.execute(sql.complete_and_claim_jobs(JOBS), params).all()
        rows = conn.execute(text(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE '%completed_now%'"
        )).all()
        conn.rollback()
    assert len(rows) == 1, rows
    return tuple(rows[0])


def test_a_worker_session_runs_the_round_on_its_generic_plan(drained_engine):
    """Finding each held row by primary key rarely wins PostgreSQL's custom-versus-generic plan
    comparison at small batches: without ``plan_cache_mode = force_generic_plan`` (set on every
    worker session) the round is planned afresh on every execution. The control, the same
    statement on an ordinary session, shows the count would tell."""
    ours = worker_engine(drained_engine, pool_size=1, call_timeout=30.0)
    try:
        generic, custom = _plans_of_the_prepared_round(ours)
    finally:
        ours.dispose()
    assert generic >= 5 and custom == 0, (generic, custom)

    control_generic, control_custom = _plans_of_the_prepared_round(drained_engine)
    assert control_custom > 0, (control_generic, control_custom)


def test_a_claim_from_a_position_does_not_read_the_dead_entries_behind_it(create_database):
    """What the position is for. While a snapshot held open keeps VACUUM from removing the
    index entries that claimed jobs left, a worker's round from its position reads a few pages;
    from the head of the index it reads past every one of them. And it skips only those: every
    job ahead of the position is still claimed from there."""
    engine = create_engine(create_database())
    queue = sq.Queue(engine, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")
    queue.enqueue_many([{"task": "send_email", "payload": {}} for _ in range(3_000)])
    try:
        with engine.connect() as holder:
            holder.execute(text("BEGIN ISOLATION LEVEL REPEATABLE READ"))
            holder.execute(text("SELECT 1"))  # the vacuum horizon, held until the rollback
            position = None
            for _ in range(29):  # as a worker drains: claims of 100, each from where the last got to
                _, claimed = queue.complete_and_claim([], worker_id="w", limit=100, from_position=position)
                queue.complete_many(claimed)
                position = worker_module.claim_position(claimed)
            pages = {name: _pages_read(engine, at) for name, at in (("position", position), ("head", None))}
            _, rest = queue.complete_and_claim([], worker_id="w", limit=500, from_position=position)
            holder.rollback()
    finally:
        engine.dispose()
    assert len(rest) == 100
    assert pages["position"] * 5 < pages["head"], pages


def _pages_read(engine, position: tuple | None) -> int:
    """Buffers the worker's round (from `position`, or from the head) touches in its reads of
    the pending index (index and heap pages), run and rolled back."""
    params = {**ROUND_PARAMS, "queues": ["default"], "limit": 1}
    if position is not None:
        params.update({key: [value] for key, value in zip(("from_priority", "from_run_at", "from_id"), position)})
    text_sent, params_sent = _sent(engine, sql.complete_and_claim_jobs(JOBS, from_position=position is not None),
                                   params)
    with engine.connect() as conn:
        cursor = conn.connection.driver_connection.cursor()
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + text_sent, params_sent)
        [[document]] = cursor.fetchall()
        conn.rollback()
    scans = [node for node in plan_nodes(document[0]["Plan"]) if node.get("Index Name") == INDEX]
    return sum(scan["Shared Hit Blocks"] + scan["Shared Read Blocks"] for scan in scans)
