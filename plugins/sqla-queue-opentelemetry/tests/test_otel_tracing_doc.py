"""docs/how-to/tracing.md, run as written: its three modules written out as ``myapp/``, the
Flask server started by its command, the request made by its ``curl``, the worker run by its
command; the spans both processes print are one trace, and the handler's log line carries it."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sqla_queue.testing import migrated_database

DOC = Path(__file__).resolve().parents[3] / "docs" / "how-to" / "tracing.md"
BIN = str(Path(sys.executable).parent)


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), flags=re.S)


def commands() -> list[str]:
    return [line[2:] for block in blocks("console") for line in block.splitlines() if line.startswith("$ ")]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spans_in(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith('{"name"')]


@pytest.fixture
def app_dir(tmp_path) -> Path:
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    for block in blocks("python"):
        first = block.splitlines()[0]
        assert first.startswith("# myapp/"), first
        (tmp_path / first[2:]).write_text(block)
    return tmp_path


def test_the_page_shows_these_commands():
    assert commands() == [
        "flask --app myapp.web run",
        """curl -s -X POST "$WEB/orders" -H 'Content-Type: application/json' -d '{"order_id": 42}'""",
        "SHOP_ROLE=worker sqla-queue --app myapp.jobs:queue worker --until-empty --log-format json",
    ]


def test_a_request_its_job_and_the_handlers_span_are_one_trace(app_dir):
    server_command, curl_command, worker_command = commands()
    port = free_port()
    with migrated_database() as url:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SQLA_QUEUE_", "OTEL_"))}
        env.update(PATH=f"{BIN}{os.pathsep}{env['PATH']}", SQLA_QUEUE_DATABASE_URL=url,
                   FLASK_RUN_PORT=str(port), WEB=f"http://127.0.0.1:{port}")
        server_log = app_dir / "server.out"
        with server_log.open("w") as out:
            server = subprocess.Popen(["bash", "-c", f"exec {server_command}"], cwd=app_dir, env=env,
                                      stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait(lambda: _listening(port), f"the server on port {port}", server, server_log)
            created = subprocess.run(["bash", "-c", curl_command], cwd=app_dir, env=env, capture_output=True,
                                     text=True, timeout=60, check=True)
            job_id = json.loads(created.stdout)["job_id"]
            _wait(lambda: len(spans_in(server_log.read_text())) == 2, "the server's two spans", server, server_log)
        finally:
            server.terminate()
            server.wait(timeout=30)
        worker = subprocess.run(["bash", "-c", worker_command], cwd=app_dir, env=env, capture_output=True,
                                text=True, timeout=120, check=False)
    assert worker.returncode == 0, worker.stderr
    web = {s["name"]: s for s in spans_in(server_log.read_text())}
    worker_spans = spans_in(worker.stdout)
    there = {s["name"]: s for s in worker_spans}
    assert list(web) == ["send default", "POST /orders"]
    assert {"claim default", "charge card", "process default"} <= set(there)
    # The completion is a batch span of its own, or went with the worker's next claim round
    # (whichever the claim loop ran first once the handler returned): one batch carries it.
    assert sum(s["attributes"].get("sqla_queue.batch.completed", 0) for s in worker_spans
               if s["name"] in ("complete default", "claim default")) == 1
    request, send = web["POST /orders"], web["send default"]
    process, charge = there["process default"], there["charge card"]
    trace_id = request["context"]["trace_id"]
    assert {send["context"]["trace_id"], process["context"]["trace_id"], charge["context"]["trace_id"]} == {trace_id}
    assert send["parent_id"] == request["context"]["span_id"]
    assert process["parent_id"] == send["context"]["span_id"]
    assert charge["parent_id"] == process["context"]["span_id"]
    assert process["kind"] == "SpanKind.CONSUMER" and send["kind"] == "SpanKind.PRODUCER"
    assert process["attributes"]["messaging.message.id"] == str(job_id)
    assert process["attributes"]["messaging.destination.name"] == "default"
    assert process["resource"]["attributes"]["service.name"] == "shop-worker"
    (line,) = [json.loads(x) for x in worker.stderr.splitlines() if '"charging order 42"' in x]
    assert (line["trace_id"], line["span_id"]) == (trace_id[2:], charge["context"]["span_id"][2:])


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _wait(predicate, what: str, process: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        assert process.poll() is None, f"the server exited while waiting for {what}:\n{log.read_text()}"
        time.sleep(0.05)
    raise AssertionError(f"no {what} after {timeout} s:\n{log.read_text()}")
