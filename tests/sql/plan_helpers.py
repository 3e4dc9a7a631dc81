"""Helpers for the plan tests: reading the planner's JSON plans."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection, Engine, text

from sqla_queue.sql.catalog import explain


def plan_of(engine: Engine, statement: Any, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """The planner's JSON plan for a built statement, with its real parameters (not run)."""
    with engine.connect() as conn:
        [[document]] = conn.execute(explain(statement), params or {}).all()
        conn.rollback()
    plan = document if isinstance(document, list) else json.loads(document)
    return plan[0]["Plan"]


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


def indexes_used(plan: dict[str, Any]) -> set[str]:
    return {node["Index Name"] for node in plan_nodes(plan) if "Index Name" in node}


def seq_scanned(plan: dict[str, Any]) -> set[str]:
    return {node["Relation Name"] for node in plan_nodes(plan) if node["Node Type"] == "Seq Scan"}


def insert_grouped_history(conn: Connection) -> None:
    """100,000 completed jobs over 500 keys: the history a production table keeps behind its
    pending jobs, which no claim may scan."""
    conn.execute(text(
        "INSERT INTO sqla_queue_jobs (queue_name, task, payload, status, attempts, run_at, locked_at,"
        " completed_at, group_key) SELECT 'default', 'send_email', '{}', 'completed', 1, now(), now(), now(),"
        " 'key-' || (g % 500) FROM generate_series(1, 100000) AS g"))
