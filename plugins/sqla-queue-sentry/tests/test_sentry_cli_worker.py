"""A ``sqla-queue worker`` process with the plugin enabled by ``--plugin sentry`` and the
application's own default ``sentry_sdk.init()``: one event for a job that fails for good."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import sqla_queue as sq

APP = '''
import json
import os

import sentry_sdk
from sentry_sdk.transport import Transport

import sqla_queue as sq


class FileTransport(Transport):
    """The test's stand-in for Sentry: every event as a line of JSON."""

    def capture_envelope(self, envelope):
        with open(os.environ["SENTRY_EVENTS_FILE"], "a") as out:
            for item in envelope.items:
                if item.type == "event":
                    out.write(json.dumps(item.payload.json) + "\\n")


sentry_sdk.init(dsn="https://public@sentry.invalid/1", transport=FileTransport)
queue = sq.Queue(os.environ["SQLA_QUEUE_DATABASE_URL"])


@queue.task(queue=os.environ["APP_QUEUE"], max_attempts=2, retry_delay=0)
def charge(payload, ctx):
    raise RuntimeError(f"card {payload['card']} declined")
'''

SECRET = "4111-1111-1111-1111"


def test_a_cli_worker_reports_a_final_failure_once(engine, queue_name, tmp_path: Path):
    (tmp_path / "sentry_app.py").write_text(textwrap.dedent(APP))
    events_file = tmp_path / "events.jsonl"
    url = engine.url.render_as_string(hide_password=False)
    producer = sq.Queue(engine, load_entrypoints=False)
    producer.task(name="charge", queue=queue_name, max_attempts=2)(lambda payload, ctx: None)
    job_id = producer.enqueue("charge", {"card": SECRET}, idempotency_key="order-19")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("SQLA_QUEUE_", "SENTRY_"))},
           "SQLA_QUEUE_DATABASE_URL": url, "SENTRY_EVENTS_FILE": str(events_file), "APP_QUEUE": queue_name,
           "PYTHONPATH": str(tmp_path)}
    sqla_queue_cli = Path(sys.executable).parent / "sqla-queue"

    done = subprocess.run([str(sqla_queue_cli), "--app", "sentry_app:queue", "--plugin", "sentry", "worker",
                           "--queues", queue_name, "--processes", "1", "--until-empty", "--poll-interval", "0.05"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    assert "failed for good" in done.stderr  # the worker's own log line, which is no second event
    assert producer.get_job(job_id).status is sq.JobStatus.FAILED
    (event,) = [json.loads(line) for line in events_file.read_text().splitlines()]
    assert event["level"] == "error"
    assert event["fingerprint"] == ["sqla_queue", "charge", "RuntimeError"]
    assert {key: event["tags"][key] for key in ("sqla_queue.job_id", "sqla_queue.idempotency_key",
                                                  "sqla_queue.attempt", "sqla_queue.queue")} == {
        "sqla_queue.job_id": str(job_id), "sqla_queue.idempotency_key": "order-19", "sqla_queue.attempt": "2",
        "sqla_queue.queue": queue_name}
    assert SECRET not in events_file.read_text()
