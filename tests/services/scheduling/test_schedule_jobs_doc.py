"""docs/how-to/schedule-jobs.md, run as written: its app module, its worker command until the
five-second schedule has ticked, and `sqla-queue schedules`, whose output the page shows."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import doc_blocks
from sqlalchemy import text

DOC = Path(__file__).resolve().parents[3] / "docs" / "how-to" / "schedule-jobs.md"
SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))


def blocks(kind: str) -> list[str]:
    return doc_blocks.blocks(DOC, kind)


def commands() -> list[str]:
    return doc_blocks.console_commands(DOC)


def argv(command: str) -> list[str]:
    words = shlex.split(command)
    assert words[0] == "sqla-queue"
    return [SCRIPT, *words[1:]]


def table_rows(output: str) -> list[list[str]]:
    """The cells of a rich table's body rows (and its header, first)."""
    return [[cell.strip() for cell in line.strip("│┃").split(line[0])]
            for line in output.splitlines() if line[:1] in ("│", "┃")]


@pytest.fixture
def app_dir(tmp_path, database_url, queue):
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "jobs.py").write_text(blocks("python")[0])
    return tmp_path


@pytest.fixture
def env(database_url):
    values = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    values["SQLA_QUEUE_DATABASE_URL"] = database_url
    return values


def test_the_page_shows_exactly_these_commands():
    assert commands() == [
        "sqla-queue --app myapp.jobs:queue worker --queues default,reports,emails",
        "sqla-queue --app myapp.jobs:queue schedules",
    ]


def test_the_page_runs_as_written(app_dir, env, engine):
    worker_command, list_command = commands()
    worker = subprocess.Popen(argv(worker_command), cwd=app_dir, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        give_up = time.monotonic() + 60
        while _completed(engine, "poll_settlements") < 1:
            assert worker.poll() is None, worker.communicate()
            assert time.monotonic() < give_up, "poll_settlements never ran"
            time.sleep(0.2)
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, err

    with engine.connect() as conn:
        ticks = conn.execute(text("SELECT scheduled_at FROM sqla_queue_jobs WHERE task = 'poll_settlements' "
                                  "ORDER BY scheduled_at")).scalars().all()
        stored = conn.execute(text("SELECT last_tick FROM sqla_queue_jobs_schedules "
                                   "WHERE name = 'poll_settlements'")).scalar_one()
    assert len(ticks) == len(set(ticks)) and stored == ticks[-1]
    assert all(tick.timestamp() % 5 == 0 for tick in ticks)  # every=5s: multiples of 5 s since the epoch

    listed_from = datetime.now(timezone.utc)
    result = subprocess.run(argv(list_command), cwd=app_dir, env=env, capture_output=True, text=True, timeout=60)
    listed_by = datetime.now(timezone.utc)
    assert result.returncode == 0, result.stderr
    [header, *rows] = table_rows(result.stdout)
    [shown_header, *shown_rows] = table_rows(blocks("text")[0])
    assert header == shown_header == ["name", "task", "schedule", "timezone", "queue", "last tick", "next tick"]
    assert [row[:5] for row in rows] == [row[:5] for row in shown_rows]  # the page's schedules, as declared
    polls = next(row for row in rows if row[0] == "poll_settlements")
    assert polls[5] == stored.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    next_tick = datetime.strptime(polls[6], "%Y-%m-%d %H:%M:%SZ").replace(tzinfo=timezone.utc)
    # The next tick after the listing's clock, read between the clock before and after it ran
    # (its start-up may take longer than one 5 s interval on a busy machine).
    assert listed_from < next_tick <= listed_by + timedelta(seconds=5)


def test_schedules_needs_the_app(env, tmp_path):
    result = subprocess.run([SCRIPT, "schedules"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert "`schedules` lists the schedules your application declares: it needs --app" in result.stderr


def _completed(engine, task: str) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM sqla_queue_jobs WHERE task = :t AND status = 'completed'"),
                            {"t": task}).scalar_one()
