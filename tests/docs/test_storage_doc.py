"""docs/explanation/storage.md, its command run as written against a fresh migrated database,
twice: the first converts, the second says there is nothing to do."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import doc_blocks
from sqlalchemy import create_engine, text

DOC = Path(__file__).resolve().parents[2] / "docs" / "explanation" / "storage.md"
SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))


def test_the_command_converts_the_table_and_prints_what_the_page_shows(create_database, tmp_path):
    url = create_database()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env["SQLA_QUEUE_DATABASE_URL"] = url
    (command,) = doc_blocks.console_commands(DOC)
    expected = doc_blocks.blocks(DOC, "console")[0].splitlines()[1]
    runs = [subprocess.run([SCRIPT, *shlex.split(command)[1:]], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=120) for _ in range(2)]
    assert [run.returncode for run in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    assert runs[0].stdout.strip() == expected
    assert runs[1].stdout.strip() == "job table already partitioned: nothing to do"
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            kinds = dict(conn.execute(text(
                "SELECT relname, relkind FROM pg_class WHERE relname IN "
                "('sqla_queue_jobs', 'sqla_queue_jobs_live', 'sqla_queue_jobs_history')")).all())
    finally:
        engine.dispose()
    assert kinds == {"sqla_queue_jobs": "p", "sqla_queue_jobs_live": "r", "sqla_queue_jobs_history": "p"}
