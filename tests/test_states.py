"""`sqla_queue/states.py` is the one list of job states: the schema the migrations build, the
models, retention and the statements are derived from its rows, so adding a state is a row,
a migration and its SQL. Each test fails if one of them spells the states out on its own."""

from __future__ import annotations

import re

from sqlalchemy import Engine, text

import sqla_queue as sq
from sqla_queue import states
from sqla_queue.db.statements import Statements
from sqla_queue.services.pruning import JOB_KINDS, PruneConfig


def _statuses(sql: str) -> set[str]:
    return set(re.findall(r"'(\w+)'", sql))


def test_every_status_has_exactly_one_row():
    assert [state.status for state in states.STATES] == list(sq.JobStatus)


def test_the_migrated_check_constraint_allows_exactly_the_states(engine: Engine):
    with engine.connect() as conn:
        definition = conn.execute(text(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'ck_sqla_queue_jobs_status'"
        )).scalar_one()
    assert _statuses(definition) == {state.value for state in states.STATES}
    assert _statuses(states.check_constraint_sql()) == {state.value for state in states.STATES}


def test_the_dedupe_index_covers_the_active_states(engine: Engine):
    with engine.connect() as conn:
        definition = conn.execute(text(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'sqla_queue_jobs_active_key_idx'"
        )).scalar_one()
    assert _statuses(definition) == {status.value for status in states.ACTIVE} == {"waiting", "pending", "running"}


def test_each_finished_state_has_its_column_and_index(engine: Engine):
    with engine.connect() as conn:
        indexes = dict(conn.execute(text(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'sqla_queue_jobs'")).all())
    for state in states.FINISHED:
        assert state.finished_at in sq.Job.__table__.c
        definition = indexes[f"sqla_queue_jobs_{state.finished_at}_idx"]
        assert _statuses(definition) == {state.value}


def test_retention_and_its_statements_follow_the_finished_states():
    finished = tuple(state.value for state in states.FINISHED)
    assert JOB_KINDS == finished == ("completed", "failed", "cancelled")
    assert {f"{kind}_after" for kind in finished} <= {name for name in PruneConfig.__dataclass_fields__}
    assert set(Statements.for_table(sq.Job.__table__).prune) == {*finished, "counters"}
    assert set(sq.types.FINISHED_STATUSES) == {state.status for state in states.FINISHED}


def test_a_row_is_all_the_derived_sql_needs():
    """The helpers read whatever rows they are given: an added row reaches the constraint and the
    dedupe predicate without another edit."""
    extra = states.State(sq.JobStatus.PENDING, active=True)  # a stand-in row, as a new one would be
    rows = (*states.STATES[1:], extra)
    assert _statuses(states.check_constraint_sql(rows)) == {state.value for state in rows}
    assert _statuses(states.active_predicate_sql(rows)) == {"pending", "running"}
    assert states.state_of("cancelled").finished_at == "cancelled_at"
