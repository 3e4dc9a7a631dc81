"""`sqla-queue worker` imports only what a worker uses: the commands it does not run (Alembic
behind `db` and `alembic`, Rich behind the commands that print tables, the doctor's checks) stay
unloaded, which is most of a worker's start-up time otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import json, sys
sys.argv = ["sqla-queue", "--app", "app:queue", "worker", "--until-empty"]
from sqla_queue.cli import run
try:
    run()
except SystemExit as exc:
    assert not exc.code, exc.code
loaded = sorted({name.split(".")[0] if not name.startswith("sqla_queue") else name for name in sys.modules})
print(json.dumps(loaded))
"""

APP = """
import os
import sqla_queue as sq

queue = sq.Queue(os.environ["APP_URL"], load_entrypoints=False)


@queue.task
def noop(payload, ctx):
    return None
"""


def test_a_worker_run_never_imports_the_other_commands(tmp_path, database_url, clean_jobs):
    (tmp_path / "app.py").write_text(APP)
    env = {**os.environ, "APP_URL": database_url, "SQLA_QUEUE_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))

    assert "sqla_queue.worker.worker" in loaded and "sqla_queue.cli.worker" in loaded  # it did run
    unused = {"alembic", "mako", "rich", "sqla_queue.migrations", "sqla_queue.cli.alembic_cmd",
              "sqla_queue.cli.db", "sqla_queue.cli.stats", "sqla_queue.cli.jobs", "sqla_queue.ops.doctor"}
    assert loaded & unused == set()
