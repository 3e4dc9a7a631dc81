"""An asyncio application's Queue (built from an AsyncEngine, async handlers) driven by the
console script, as its operators would: enqueue, a worker that runs the async handler with no
extra flag, stats and jobs show. The app's own synchronous calls are refused; the command line
connects like its worker, on the engine's URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from sqlalchemy.engine import make_url

SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))

APP = textwrap.dedent(
    """
    import asyncio
    import os

    from sqlalchemy.ext.asyncio import create_async_engine

    import sqla_queue as sq

    engine = create_async_engine(os.environ["APP_DATABASE_URL"])
    queue = sq.Queue(engine, load_entrypoints=False)

    @queue.task(queue="async_cli")
    async def notify(payload, ctx):
        await asyncio.sleep(0.01)
        if payload.get("fail"):
            raise RuntimeError("partner said no")
    """
)


def test_the_command_line_serves_an_asyncio_app(tmp_path, database_url, queue):
    (tmp_path / "asyncapp.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env["APP_DATABASE_URL"] = make_url(database_url).set(
        drivername="postgresql+psycopg_async").render_as_string(hide_password=False)

    def cli(*args: str) -> subprocess.CompletedProcess:
        result = subprocess.run([SCRIPT, "--app", "asyncapp:queue", *args], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return result

    ok = int(cli("enqueue", "notify", '{"to": "a"}').stdout)
    failing = int(cli("enqueue", "notify", '{"fail": true}', "--max-attempts", "1").stdout)
    cli("worker", "--queues", "async_cli", "--until-empty", "--poll-interval", "0.05")

    assert queue.get_job(ok).status.value == "completed"
    failed = queue.get_job(failing)
    assert failed.status.value == "failed" and failed.last_error == "RuntimeError: partner said no"
    health = json.loads(cli("stats", "--json").stdout)["async_cli"]
    assert (health["completed"], health["failed"]) == (1, 1)
    assert "partner said no" in cli("jobs", "show", str(failing)).stdout
