"""``sqla-queue schedules`` as a real subprocess: the app's schedules with the last tick from
the database (or never) and the next one, as a table or JSON; an app without schedules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from sqla_queue.services.scheduler import fire_tick

SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))
UTC = timezone.utc

APP = textwrap.dedent(
    """
    import os
    from datetime import timedelta

    import sqla_queue as sq

    queue = sq.Queue(os.environ["APP_DATABASE_URL"], load_entrypoints=False)

    @queue.periodic(cron="30 2 * * *", timezone="America/New_York", queue="nightly", priority=-1)
    @queue.task(queue="reports")
    def nightly_export(payload, ctx):
        pass

    @queue.periodic(every=timedelta(minutes=15), backfill=True)
    def refresh(payload, ctx):
        pass

    bare = sq.Queue(os.environ["APP_DATABASE_URL"], load_entrypoints=False)
    """
)


@pytest.fixture
def cli(tmp_path, database_url, queue):
    (tmp_path / "schedcli.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env["APP_DATABASE_URL"] = database_url

    def run(*args: str, app: str = "schedcli:queue") -> subprocess.CompletedProcess:
        return subprocess.run([SCRIPT, "--app", app, "schedules", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    return run


def test_json_lists_each_schedule_with_its_last_and_next_tick(cli, queue):
    refresh_task = queue.task(name="refresh")(lambda payload, ctx: None)  # the app's schedule, seen from here
    queue.periodic(refresh_task, every=timedelta(minutes=15), backfill=True)
    tick_at = datetime(2026, 5, 4, 12, 15, tzinfo=UTC)
    fire_tick(queue.core, queue.schedules[0], tick_at + timedelta(seconds=3), not_before=tick_at - timedelta(minutes=1))

    before = datetime.now(UTC)
    result = cli("--json")
    assert result.returncode == 0, result.stderr
    nightly, refresh = json.loads(result.stdout)
    assert {k: v for k, v in nightly.items() if k != "next_tick"} == {
        "name": "nightly_export", "task": "nightly_export", "schedule": "30 2 * * *",
        "timezone": "America/New_York", "queue": "nightly", "backfill": False, "last_tick": None}
    next_nightly = datetime.fromisoformat(nightly["next_tick"])
    local = next_nightly.astimezone(ZoneInfo("America/New_York"))
    assert (local.hour, local.minute) in ((2, 30), (3, 0))  # 03:00 only the night 02:30 is skipped
    assert before < next_nightly <= before + timedelta(days=1, hours=1)
    assert refresh["last_tick"] == tick_at.isoformat()
    assert (refresh["schedule"], refresh["queue"], refresh["backfill"]) == ("every 15m", "default", True)
    next_refresh = datetime.fromisoformat(refresh["next_tick"])
    assert next_refresh.minute % 15 == 0 and before < next_refresh <= before + timedelta(minutes=15)


def test_the_table_says_never_before_the_first_tick(cli):
    result = cli()
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert len(lines) == 2
    assert "nightly_export" in lines[0] and "America/New_York" in lines[0] and "never" in lines[0]
    assert "every 15m (backfill)" in lines[1] and "never" in lines[1]


def test_an_app_without_schedules_says_so(cli):
    result = cli(app="schedcli:bare")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "no schedules: schedcli:bare declares none (@queue.periodic)"
    assert json.loads(cli("--json", app="schedcli:bare").stdout) == []
