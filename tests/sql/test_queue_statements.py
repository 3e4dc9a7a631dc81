"""Each statement of sqla_queue.sql, compiled for PostgreSQL: its shape is the contract.

Compiled the way SQLAlchemy executes it (``render_postcompile``), so literal-execute values
appear exactly as PostgreSQL receives them.
"""

from __future__ import annotations

import re
import warnings

import pytest
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.exc import SAWarning

import sqla_queue as sq
from sqla_queue import sql
from sqla_queue.sql import jobs as job_sql
from sqla_queue.sql.claim import claim_job_by_id
from sqla_queue.sql.time_travel import advance_due_jobs

TABLE = sq.Job.__table__


class _Compiler(PGDialect_psycopg.statement_compiler):
    """Renders post-compile values without asking for every bound value (there are none yet)."""

    def construct_params(self, *args, **kwargs):
        kwargs["_check"] = False
        return super().construct_params(*args, **kwargs)


class _Dialect(PGDialect_psycopg):
    statement_compiler = _Compiler


def compiled(statement):
    return statement.compile(dialect=_Dialect(), compile_kwargs={"render_postcompile": True})


def rendered(statement) -> str:
    return " ".join(str(compiled(statement)).split())


def cte_body(text: str, name: str) -> str:
    """The SQL inside ``WITH name AS (...)`` (or ``, name AS (...)``, a later CTE)."""
    start = text.index(f" {name} AS (") + len(f" {name} AS (")
    depth, end = 1, start
    while depth:
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        end += 1
    return text[start : end - 1]


def bound_strings(statement) -> set[str]:
    """Values bound as parameters: a status name must never be one of them in a predicate."""
    return {v for v in compiled(statement).params.values() if isinstance(v, str)}


# -- claim ------------------------------------------------------------------------------------


def test_claim_selects_in_a_locking_cte_whose_ids_the_update_looks_up():
    text = rendered(sql.claim_jobs(TABLE))
    body = cte_body(text, "due_jobs")

    assert text.startswith("WITH due_jobs AS (SELECT sqla_queue_jobs.id")
    assert "FOR UPDATE SKIP LOCKED" in body
    assert re.search(r"ORDER BY sqla_queue_jobs\.priority DESC, sqla_queue_jobs\.run_at, sqla_queue_jobs\.id "
                     r"LIMIT \S+ FOR UPDATE", body)
    # by primary key from the CTE's ids as an array, not joined to it (`sql.claim.by_id_from`)
    assert re.search(r"\) UPDATE sqla_queue_jobs SET .* WHERE sqla_queue_jobs\.id = ANY \(array\(\(SELECT "
                     r"due_jobs\.id FROM due_jobs\)\)\) AND sqla_queue_jobs\.archived IS false RETURNING", text)
    assert "FOR UPDATE" not in text.replace(body, "")  # the lock lives in the CTE only


def test_claim_predicate_matches_the_pending_partial_index():
    body = cte_body(rendered(sql.claim_jobs(TABLE)), "due_jobs")

    assert "sqla_queue_jobs.queue_name = %(queue)s" in body
    assert "sqla_queue_jobs.status = 'pending'" in body
    assert "sqla_queue_jobs.run_at <= clock_timestamp()" in body
    assert "sqla_queue_jobs.attempts < sqla_queue_jobs.max_attempts" in body


def test_claim_status_is_a_literal_execute_value_not_a_parameter():
    raw = sql.claim_jobs(TABLE).compile(dialect=PGDialect_psycopg())
    [literal] = [bind for bind in raw.literal_execute_params if bind.key != "limit"]
    assert literal.value == "pending"
    assert "status = __[POSTCOMPILE_" in str(raw)  # inlined at execution time
    assert "pending" not in bound_strings(sql.claim_jobs(TABLE))


def test_claim_limit_is_inlined_so_the_generic_plan_knows_the_batch_size():
    """With ``LIMIT $n`` PostgreSQL's generic plan assumes a tenth of the queue and updates the
    claimed rows through a sequential scan, so it re-plans the claim on every execution."""
    raw = sql.claim_jobs(TABLE).compile(dialect=PGDialect_psycopg())
    assert "LIMIT __[POSTCOMPILE_limit]" in str(raw)
    expanded = raw.construct_expanded_state({"queue": "q", "worker_id": "w", "token": "t", "limit": 7, "lease": None})
    assert "LIMIT 7 FOR UPDATE SKIP LOCKED" in expanded.statement
    assert "limit" not in expanded.parameters


def test_claim_sets_the_running_state_from_the_database_clock():
    text = rendered(sql.claim_jobs(TABLE))
    update = text[text.index(") UPDATE") :]

    for assignment in (
        "status=%(status)s",
        "attempts=(sqla_queue_jobs.attempts + %(attempts_1)s",
        "locked_at=clock_timestamp()",
        "lease_expires_at=(clock_timestamp() + %(lease)s)",  # the claiming worker's own lease
        "locked_by=%(worker_id)s",
        "claim_token=%(token)s",
        "last_error=%(last_error)s",
    ):
        assert assignment in update
    params = compiled(sql.claim_jobs(TABLE)).params
    assert (params["status"], params["attempts_1"], params["last_error"]) == ("running", 1, None)


def test_claim_returns_what_a_worker_needs():
    returning = rendered(sql.claim_jobs(TABLE)).split("RETURNING", 1)[1]
    for column in ("id", "task", "payload", "attempts", "max_attempts", "claim_token", "queue_name"):
        assert f"sqla_queue_jobs.{column}" in returning


def test_the_round_fuses_the_batch_completion_and_the_claim_into_one_statement():
    """One statement, so one round trip and (in autocommit) one commit per worker round."""
    text = rendered(sql.complete_and_claim_jobs(TABLE))
    completed, claimed = cte_body(text, "completed_now"), cte_body(text, "claimed_now")

    # the batch completion, each row fenced by its own token (only parameter names differ)
    assert re.sub(r"%\(\w+\)s", "?", completed) == re.sub(r"%\(\w+\)s", "?", rendered(sql.complete_jobs(TABLE)))
    # one notification listing the completed ids, joined in so that it runs
    assert "pg_notify(" in cte_body(text, "completed_now_announced")
    assert "FOR UPDATE SKIP LOCKED" in cte_body(text, "due_jobs")
    assert claimed.startswith("UPDATE sqla_queue_jobs SET") and "FROM due_jobs" in claimed
    assert text.count("FOR UPDATE") == 1
    first, second = text.rsplit(" UNION ALL ", 1)
    assert ") SELECT false AS claimed" in first
    # the completions' dependents settled (sql/dependencies.py) and their ids announced, both
    # joined in so that they run
    assert first.endswith("FROM completed_now LEFT OUTER JOIN completed_now_released_announced ON true "
                          "LEFT OUTER JOIN completed_now_woken ON true "
                          "LEFT OUTER JOIN completed_now_parents_missed ON true "
                          "LEFT OUTER JOIN completed_now_announced ON true")
    assert second.startswith("SELECT true AS claimed") and second.endswith("FROM claimed_now")
    assert "pending" not in bound_strings(sql.complete_and_claim_jobs(TABLE))


def test_the_round_claims_from_a_position_in_claim_order_as_an_index_condition():
    """Per queue, equality on the priority and a row comparison on the pending index's next
    columns, so the scan starts at the position instead of reading every dead entry before it;
    a queue without a position (NULL) is read from the head by another branch; the higher and
    lower priorities by two more; the round without positions (and `Queue.claim`) starts at the
    start of the claim order."""
    due = cte_body(rendered(sql.complete_and_claim_jobs(TABLE, from_position=True)), "due_jobs")
    assert ("unnest(%(queues)s::TEXT[], %(from_priority)s::SMALLINT[], %(from_run_at)s::TIMESTAMP WITH TIME "
            "ZONE[], %(from_id)s::BIGINT[]) AS served(queue_name, from_priority, from_run_at, from_id)") in due
    assert "sqla_queue_jobs.priority = served.from_priority" in due
    assert "(sqla_queue_jobs.run_at, sqla_queue_jobs.id) >= (served.from_run_at, served.from_id)" in due
    assert "served.from_priority IS NULL" in due and " UNION ALL " in due
    # Around the position, in claim order: the higher priorities first, the lower ones after.
    before, at, after = (due.index(text) for text in (
        "sqla_queue_jobs.priority > served.from_priority", "sqla_queue_jobs.priority = served.from_priority",
        "sqla_queue_jobs.priority < served.from_priority"))
    assert before < at < after
    assert due.count("FOR UPDATE SKIP LOCKED") == 4
    assert "from_" not in rendered(sql.complete_and_claim_jobs(TABLE))
    assert "from_" not in rendered(sql.claim_jobs(TABLE))


def test_the_rounds_claim_reads_every_served_queue_in_one_statement_and_only_registered_tasks():
    """One LATERAL read of the pending index per queue of ``:queues`` (in the list's order,
    which the worker rotates), an outer LIMIT that stops pulling rows once it has enough, the
    pause check per queue inside its read (a gate on the outer row), and the task condition."""
    due = cte_body(rendered(sql.complete_and_claim_jobs(TABLE)), "due_jobs")
    assert due.startswith("SELECT picked.id AS id FROM unnest(%(queues)s::TEXT[]) AS served(queue_name) "
                          "JOIN LATERAL (SELECT sqla_queue_jobs.id AS id FROM sqla_queue_jobs WHERE "
                          "sqla_queue_jobs.queue_name = served.queue_name AND ")
    assert ("(%(tasks)s::TEXT[] IS NULL OR sqla_queue_jobs.task = ANY (%(tasks)s::TEXT[]))") in due
    assert ("NOT (EXISTS (SELECT * FROM sqla_queue_jobs_queues WHERE sqla_queue_jobs_queues.queue_name = "
            "served.queue_name AND sqla_queue_jobs_queues.paused_at IS NOT NULL)) ORDER BY") in due
    assert due.count(" LIMIT ") == 2 and due.endswith(") AS picked ON true LIMIT NULL")  # inlined when run


def test_a_paused_queue_claims_nothing_by_a_check_inside_the_claim():
    due = cte_body(rendered(sql.claim_jobs(TABLE)), "due_jobs")
    assert ("NOT (EXISTS (SELECT * FROM sqla_queue_jobs_queues WHERE sqla_queue_jobs_queues.queue_name = "
            "%(queue)s::VARCHAR AND sqla_queue_jobs_queues.paused_at IS NOT NULL))") in due


# -- outcomes ---------------------------------------------------------------------------------

OUTCOMES = {
    "complete": (sql.complete_job, "completed_now", "('completed', 'cancelled')"),
    "retry": (sql.retry_job, "retried_now", "('pending', 'failed', 'cancelled')"),
    "fail": (sql.fail_job, "failed_now", "('failed', 'cancelled')"),
    "snooze": (sql.snooze_job, "snoozed_now", "('pending', 'cancelled')"),
}


@pytest.mark.parametrize("name", OUTCOMES)
def test_outcome_update_is_fenced_by_id_running_status_and_claim_token(name):
    builder, cte, _ = OUTCOMES[name]
    body = cte_body(rendered(builder(TABLE)), cte)

    assert body.startswith("UPDATE sqla_queue_jobs SET")
    where = body.split(" WHERE ", 1)[1].split(" RETURNING ", 1)[0]
    assert "sqla_queue_jobs.id = %(job_id)s" in where
    assert "sqla_queue_jobs.status = 'running'" in where
    assert "sqla_queue_jobs.claim_token = %(token)s" in where
    assert "RETURNING" in body


@pytest.mark.parametrize("name", OUTCOMES)
def test_outcome_replay_branch_matches_the_finished_row_under_the_same_token(name):
    builder, cte, finished = OUTCOMES[name]
    text = rendered(builder(TABLE))
    replay = text.rsplit("UNION ALL", 1)[1]

    assert "sqla_queue_jobs.id = %(job_id)s" in replay
    assert "sqla_queue_jobs.claim_token = %(token)s" in replay
    assert f"sqla_queue_jobs.status IN {finished}" in replay
    assert "'running'" not in replay
    assert "true AS replayed" in replay  # a replay fires no second lifecycle event
    assert "false AS replayed" in text.rsplit("UNION ALL", 1)[0]


@pytest.mark.parametrize(
    ("builder", "alias"),
    [
        (sql.renew_leases, "held"),
        (sql.release_jobs, "released"),
    ],
)
def test_batch_statements_fence_each_row_with_its_own_token(builder, alias):
    text = rendered(builder(TABLE))
    if alias == "released":  # the UPDATE is a CTE: a job released cancelled settles its dependents
        text = cte_body(text, "released_now")
    assert text.startswith("UPDATE sqla_queue_jobs SET")
    assert f"FROM unnest(%(job_ids)s::BIGINT[], %(tokens)s::TEXT[]) AS {alias}(job_id, token)" in text
    where = text.split(" WHERE ", 1)[1]
    assert f"sqla_queue_jobs.id = {alias}.job_id" in where
    assert "sqla_queue_jobs.status = 'running'" in where
    assert f"sqla_queue_jobs.claim_token = {alias}.token" in where
    assert "RETURNING sqla_queue_jobs.id" in text


def test_batch_completion_fences_each_row_and_stores_its_own_result():
    text = rendered(sql.complete_jobs(TABLE))
    assert ("FROM unnest(%(job_ids)s::BIGINT[], %(tokens)s::TEXT[], %(results)s::TEXT[]) "
            "AS finished(job_id, token, result)") in text
    where = text.split(" WHERE ", 1)[1]
    assert "sqla_queue_jobs.status = 'running'" in where
    assert "sqla_queue_jobs.claim_token = finished.token" in where
    assert "ELSE CAST(finished.result AS JSONB) END" in text


@pytest.mark.parametrize("name", ["complete", "retry", "fail", "snooze"])
def test_every_outcome_of_a_cancel_requested_job_is_cancelled(name):
    builder, cte, _ = OUTCOMES[name]
    body = cte_body(rendered(builder(TABLE)), cte)
    assert body.split(" SET ", 1)[1].startswith("status=CASE WHEN (sqla_queue_jobs.cancel_requested_at IS NOT NULL)")
    assert "cancelled_at=CASE WHEN (sqla_queue_jobs.cancel_requested_at IS NOT NULL) THEN clock_timestamp()" in body


@pytest.mark.parametrize("name", OUTCOMES)
def test_outcome_statuses_are_never_bound_as_predicate_parameters(name):
    builder, cte, _ = OUTCOMES[name]
    where_clauses = [part.split(" RETURNING ")[0] for part in rendered(builder(TABLE)).split(" WHERE ")[1:]]
    assert all("status = %(" not in clause for clause in where_clauses)


def test_retry_goes_pending_at_the_chosen_time_only_while_attempts_remain():
    body = cte_body(rendered(sql.retry_job(TABLE)), "retried_now")
    assert "WHEN (sqla_queue_jobs.attempts < sqla_queue_jobs.max_attempts) THEN" in body.split(" SET ", 1)[1].split(", run_at=")[0]
    assert "coalesce(%(retry_at)s, clock_timestamp() + %(delay)s)" in body
    assert "last_error=%(error)s" in body


def test_complete_keeps_the_claim_token_on_the_finished_row():
    body = cte_body(rendered(sql.complete_job(TABLE)), "completed_now")
    assignments = body.split(" SET ", 1)[1].split(" WHERE ", 1)[0]
    assert "claim_token" not in assignments
    assert "completed_at=CASE WHEN (sqla_queue_jobs.cancel_requested_at IS NOT NULL) THEN NULL ELSE clock_timestamp() END" in assignments


# -- recovery ---------------------------------------------------------------------------------

RECOVERY = {
    "requeue": (sql.requeue_expired, "expired_jobs", "sqla_queue_jobs.attempts < sqla_queue_jobs.max_attempts"),
    "fail-exhausted": (sql.fail_exhausted_expired, "exhausted_jobs",
                       "sqla_queue_jobs.attempts >= sqla_queue_jobs.max_attempts"),
}


@pytest.mark.parametrize("name", RECOVERY)
def test_recovery_is_a_bounded_skip_locked_sweep_of_expired_running_jobs(name):
    builder, cte, attempts_rule = RECOVERY[name]
    text = rendered(builder(TABLE))
    body = cte_body(text, cte)

    assert "FOR UPDATE SKIP LOCKED" in body
    assert "LIMIT %(limit)s" in body
    assert "sqla_queue_jobs.status = 'running'" in body
    # The holder's lease end decides; the given lease only for rows without one (pre-sqlaq_0008).
    assert ("(sqla_queue_jobs.lease_expires_at < clock_timestamp() OR sqla_queue_jobs.lease_expires_at IS NULL"
            " AND sqla_queue_jobs.locked_at < clock_timestamp() - %(lease)s)") in body
    assert attempts_rule in body
    assert "ORDER BY sqla_queue_jobs.lease_expires_at, sqla_queue_jobs.locked_at, sqla_queue_jobs.id" in body
    assert f"FROM {cte} WHERE sqla_queue_jobs.id = {cte}.id AND sqla_queue_jobs.archived IS false RETURNING" in text


@pytest.mark.parametrize(
    ("builder", "status", "error"),
    [
        (sql.requeue_expired, "pending", "claim lease expired"),
        (sql.fail_exhausted_expired, "failed", "claim lease expired on the last attempt"),
    ],
)
def test_recovery_clears_the_claim_and_says_why(builder, status, error):
    if status == "failed":  # the UPDATE is a CTE of the statement that settles the job's dependents
        with warnings.catch_warnings():  # the unset :lease and :limit render as NULL: not what this reads
            warnings.simplefilter("ignore", SAWarning)
            literal = builder(TABLE).compile(dialect=_Dialect(), compile_kwargs={"literal_binds": True})
        text = " ".join(str(literal).split())
        taken = cte_body(text, "exhausted_jobs_taken")
        assert f"status='{status}'" in taken and f"last_error='{error}'" in taken
        assert "claim_token=NULL" in taken and "locked_at=NULL" in taken and "locked_by=NULL" in taken
        assert "lease_expires_at=NULL" in taken
        return
    params = compiled(builder(TABLE)).params
    assert params["status"] == status
    assert params["last_error"] == error
    assert params["claim_token"] is None
    assert (params["locked_at"], params["locked_by"], params["lease_expires_at"]) == (None, None, None)


# -- enqueue ----------------------------------------------------------------------------------


def test_insert_skips_conflicts_on_the_active_key_index():
    """No conflict target: a partitioned table keeps the active-key index on its live partition,
    whose unique indexes (the primary key, never hit, and that one) then arbitrate."""
    text = rendered(sql.insert_jobs(TABLE))
    assert "INSERT INTO sqla_queue_jobs" in text
    assert "ON CONFLICT DO NOTHING" in text
    assert "RETURNING sqla_queue_jobs.id, sqla_queue_jobs.idempotency_key" in text


def test_insert_takes_every_job_as_one_array_parameter_per_column():
    text = rendered(sql.insert_jobs(TABLE))
    assert "unnest(" in text and "WITH ORDINALITY" in text
    assert "ORDER BY anon_1.ord" in text or re.search(r"ORDER BY \w+\.ord", text)
    assert "%(payloads)s::TEXT[]" in text


def test_active_key_lookup_covers_only_the_active_statuses():
    text = rendered(sql.find_active_keys(TABLE))
    assert "sqla_queue_jobs.idempotency_key = ANY (%(keys)s::TEXT[])" in text
    assert "sqla_queue_jobs.status IN ('waiting', 'pending', 'running')" in text


# -- the testing helpers' statements (sqla_queue.testing) --------------------------------------


def test_time_travel_moves_only_pending_jobs_due_within_the_window():
    text = rendered(advance_due_jobs(TABLE))
    assert "sqla_queue_jobs.status = 'pending'" in text
    assert "sqla_queue_jobs.queue_name = ANY (%(queues)s::TEXT[])" in text
    assert "sqla_queue_jobs.run_at > %(since)s::TIMESTAMP WITH TIME ZONE" in text
    assert "sqla_queue_jobs.run_at <= %(now)s::TIMESTAMP WITH TIME ZONE + %(advance)s::INTERVAL" in text
    assert "SET run_at=(sqla_queue_jobs.run_at - %(advance)s::INTERVAL)" in text


def test_claim_by_id_locks_its_one_pending_row_and_marks_it_as_the_claim_does():
    text = rendered(claim_job_by_id(TABLE))
    assert "WHERE sqla_queue_jobs.id = %(job_id)s::BIGINT AND sqla_queue_jobs.status = 'pending' " \
           "FOR UPDATE SKIP LOCKED" in text
    assert "attempts=coalesce(%(attempt)s::INTEGER, sqla_queue_jobs.attempts + " in text
    claim = rendered(sql.claim_jobs(TABLE))
    assert claim[claim.index("RETURNING"):] == text[text.index("RETURNING"):]  # one ClaimedJob shape
    assert "run_at <= clock_timestamp()" not in text  # run_job runs a job whenever it is due
    assert "sqla_queue_jobs.status = 'pending' AND sqla_queue_jobs.run_at <= clock_timestamp() FOR UPDATE" \
        in rendered(claim_job_by_id(TABLE, due_only=True))  # inline mode leaves later jobs pending


def test_pending_reads_use_literal_status_and_bound_values():
    text = rendered(job_sql.pending_jobs(TABLE, by_task=True, by_queue=True, by_payload=True))
    assert "sqla_queue_jobs.status = 'pending'" in text
    assert "sqla_queue_jobs.payload @> %(payload)s::JSONB" in text
    assert "ORDER BY sqla_queue_jobs.id LIMIT %(limit)s::INTEGER" in text
    assert "ORDER BY sqla_queue_jobs.priority DESC, sqla_queue_jobs.run_at, sqla_queue_jobs.id" in \
        rendered(job_sql.due_jobs(TABLE))


# -- every statement --------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in sql.__all__ if n not in ("channel_name", "finished_channel", "listen")])
def test_every_statement_builder_is_pure_and_bound(name):
    statement = getattr(sql, name)(TABLE)
    text = rendered(statement)
    assert rendered(getattr(sql, name)(TABLE)) == text  # deterministic, no hidden state
    assert "%(" in text or name == "queue_health"  # user values arrive as parameters


def test_statements_follow_a_host_table_name():
    from sqlalchemy.orm import DeclarativeBase

    class HostBase(DeclarativeBase):
        pass

    class HostJob(sq.JobMixin, HostBase):
        __tablename__ = "host_jobs"

    text = rendered(sql.claim_jobs(HostJob.__table__))
    assert "UPDATE host_jobs" in text and "sqla_queue_jobs" not in text


@pytest.mark.parametrize("name", ["complete", "retry", "fail", "snooze"])
def test_only_watched_jobs_are_announced_when_they_finish(name):
    """A NOTIFY wakes every listening session of the database (each idle worker's listener
    reads it in a transaction): announcing every completion doubled a busy worker's commits."""
    builder, cte, _ = OUTCOMES[name]
    announce = cte_body(rendered(builder(TABLE)), f"{cte}_announced")
    assert "pg_notify(" in announce and f"WHERE {cte}.watched" in announce
    assert "HAVING count(*) > %(" in announce


def test_a_wait_watches_only_an_active_job():
    text = rendered(sql.watch_job(TABLE))
    assert text.startswith("UPDATE sqla_queue_jobs SET watched=true WHERE sqla_queue_jobs.id = %(job_id)s")
    assert "sqla_queue_jobs.status IN ('waiting', 'pending', 'running')" in text
