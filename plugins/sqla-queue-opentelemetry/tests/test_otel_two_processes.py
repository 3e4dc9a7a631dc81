"""Across two processes: this test is the enqueuing application (a request span around the
enqueue), and a ``sqla-queue ... worker --until-empty`` subprocess runs the jobs with its own SDK
writing spans to a file. One trace from the request to the handler's own span; a job that fails
twice and then succeeds gives three ``process`` spans, the later two linked to ``send``, not
parented; the worker's JSON log lines carry the ids of the span they were logged in."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry import trace
from otel_sdk import EXPORTER

HERE = Path(__file__).parent
SQLA_QUEUE = str(Path(sys.executable).with_name("sqla-queue"))


@pytest.fixture(scope="module")
def run(database_url, tmp_path_factory):
    """Enqueue in a request span here, drain in a CLI worker there; both sides' spans and the
    worker's log lines."""
    os.environ["OTEL_APP_DATABASE_URL"] = database_url
    app = importlib.import_module("otel_app")
    EXPORTER.clear()
    with trace.get_tracer("tests").start_as_current_span("POST /orders"):
        shipped = app.ship.enqueue({"order": 7})
        flaky = app.flaky.enqueue({})
    here = list(EXPORTER.get_finished_spans())
    spans_file = tmp_path_factory.mktemp("worker") / "spans.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "OTEL_APP_SPANS_FILE": str(spans_file)}
    worker = subprocess.run(
        [SQLA_QUEUE, "--app", "otel_app:queue", "worker", "--queues", app.QUEUE, "--until-empty",
         "--log-format", "json"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert worker.returncode == 0, worker.stderr
    there = [json.loads(line) for line in spans_file.read_text().splitlines()]
    logs = [json.loads(line) for line in worker.stderr.splitlines() if line.startswith("{")]
    return {"here": here, "there": there, "logs": logs, "shipped": shipped, "flaky": flaky}


def hexes(span) -> tuple[str, str]:
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def sent(run, job_id: int):
    (send,) = [s for s in run["here"] if s.name.startswith("send") and s.attributes["messaging.message.id"] == str(job_id)]
    return send


def of_job(spans: list[dict], job_id: int) -> list[dict]:
    return [s for s in spans if s["attributes"].get("messaging.message.id") == str(job_id)]


def test_request_enqueue_process_and_the_handlers_span_are_one_trace(run):
    (request,) = [s for s in run["here"] if s.name == "POST /orders"]
    request_trace, request_id = hexes(request)
    send = sent(run, run["shipped"])
    assert send.parent.span_id == int(request_id, 16)
    (process,) = of_job(run["there"], run["shipped"])
    (charge,) = [s for s in run["there"] if s["name"] == "charge card"]
    assert process["name"] == "process otel-two-processes" and process["kind"] == "CONSUMER"
    assert process["parent_span_id"] == hexes(send)[1]
    assert charge["parent_span_id"] == process["span_id"]
    assert {process["trace_id"], charge["trace_id"], hexes(send)[0]} == {request_trace}


def test_a_job_that_fails_twice_then_succeeds_gives_three_process_spans_the_retries_linked(run):
    send = sent(run, run["flaky"])
    send_trace, send_id = hexes(send)
    first, second, third = sorted(of_job(run["there"], run["flaky"]),
                                  key=lambda s: s["attributes"]["sqla_queue.job.attempt"])
    assert (first["trace_id"], first["parent_span_id"]) == (send_trace, send_id)
    assert [link["kind"] for link in first["links"]] == ["claim"]
    assert [first["status"], second["status"], third["status"]] == ["ERROR", "ERROR", "UNSET"]
    for retry in (second, third):
        assert retry["parent_span_id"] is None and retry["trace_id"] != send_trace
        enqueue = [link for link in retry["links"] if link["kind"] == "enqueue"]
        assert enqueue == [{"trace_id": send_trace, "span_id": send_id, "kind": "enqueue"}]


def test_claim_rounds_and_completion_batches_are_spans_linked_to_the_jobs_spans(run):
    batches = {s["span_id"]: s for s in run["there"] if s["name"].split()[0] in ("claim", "complete")}
    processes = [s for s in run["there"] if s["name"].startswith("process")]
    assert len(processes) == 4
    for process in processes:  # every attempt links the claim round that claimed it
        (claim,) = [link for link in process["links"] if link["kind"] == "claim"]
        assert batches[claim["span_id"]]["attributes"]["messaging.operation.name"] == "claim"
        assert batches[claim["span_id"]]["attributes"]["messaging.operation.type"] == "receive"
    settled = {link["span_id"] for batch in batches.values() for link in batch["links"] if link["kind"] == "process"}
    completed = [p for p in processes if p["status"] == "UNSET"]
    assert {p["span_id"] for p in completed} <= settled  # their completions' batches link them


def test_the_workers_json_log_lines_carry_the_ids_of_the_running_jobs_span(run):
    (process,) = of_job(run["there"], run["shipped"])
    (shipping,) = [line for line in run["logs"] if line["message"] == "shipping order 7"]
    assert (shipping["trace_id"], shipping["span_id"]) == (process["trace_id"], process["span_id"])
    per_job = [line for line in run["logs"] if line.get("job_id") == run["flaky"]]
    attempts = {s["attributes"]["sqla_queue.job.attempt"]: s for s in of_job(run["there"], run["flaky"])}
    retried = [line for line in per_job if line.get("outcome") == "retried"]
    assert [(line["trace_id"], line["span_id"]) for line in retried] == [
        (attempts[n]["trace_id"], attempts[n]["span_id"]) for n in (1, 2)]
    outside = [line for line in run["logs"] if "job_id" not in line and line["logger"] != "otel_app"]
    assert outside and all("trace_id" not in line for line in outside)
