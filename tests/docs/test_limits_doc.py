"""docs/how-to/limits.md, run as written: its ``python`` blocks in page order in one namespace,
then its commands, against a fresh migrated database named by ``SQLA_QUEUE_DATABASE_URL``."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import doc_blocks

import sqla_queue as sq

DOC = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "limits.md"
SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))
APP = '''
import os
import sqla_queue as sq

queue = sq.Queue(os.environ["SQLA_QUEUE_DATABASE_URL"], load_entrypoints=False)


@queue.task(queue="sync")
def sync_account(payload, ctx):
    pass
'''


def test_the_page_runs_as_written(create_database, monkeypatch, capsys, tmp_path):
    url = create_database()
    monkeypatch.setenv("SQLA_QUEUE_DATABASE_URL", url)
    namespace: dict = {"__name__": "limits_doc"}
    try:
        for number, block in enumerate(doc_blocks.blocks(DOC, "python"), start=1):
            exec(compile(block, f"limits.md (python block {number})", "exec"), namespace)
    finally:
        queue = namespace.get("queue")
        if isinstance(queue, sq.Queue):
            queue.engine.dispose()
    printed = capsys.readouterr().out
    assert "QueueLimits(queue='sync', concurrency=20, group_concurrency=1" in printed
    assert re.search(r"^3 jobs$", printed, flags=re.M)
    assert re.search(r"^2 claimed now$", printed, flags=re.M)
    throttled = re.search(r"^(\d+) throttled claims$", printed, flags=re.M)
    assert throttled and int(throttled.group(1)) >= 1  # the rate's, and any of the serial run's

    # The page's commands: the limits set above, then more from the command line.
    queue.set_limits("sync", concurrency=20, group_concurrency=1, rate=None)
    (tmp_path / "limitsdemo.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env["SQLA_QUEUE_DATABASE_URL"] = url
    expected = doc_blocks.blocks(DOC, "console")[0].splitlines()
    outputs = {}
    for command in doc_blocks.console_commands(DOC):
        assert command.startswith("sqla-queue ")
        done = subprocess.run([SCRIPT, *shlex.split(command)[1:]], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        outputs[command] = done.stdout
    first = expected[0][2:]
    assert outputs[first].strip() == expected[1]
    assert "concurrency 20, group concurrency 1, rate 100/s, fair" in outputs[expected[2][2:]]
