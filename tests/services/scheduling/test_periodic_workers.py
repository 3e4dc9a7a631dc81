"""Periodic jobs with real worker processes: three ``sqla-queue worker`` processes keep an
``every=1s`` schedule, the same with ``backfill=True``, and a cron schedule with a seconds field
(``*/2``: every even second). Each tick is enqueued exactly once, counted by (schedule, tick),
through a SIGKILL and restart of one worker; after all workers stop for 5 s, the gap's ticks are
enqueued only for the backfill schedule."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

UTC = timezone.utc
SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))
WORKERS = 3
SECOND = timedelta(seconds=1)

APP = '''
import os
from datetime import timedelta

import sqla_queue as sq

queue = sq.Queue(os.environ["APP_DATABASE_URL"], load_entrypoints=False)


@queue.periodic(every=timedelta(seconds=1), name="every-second", payload={"schedule": "every-second"})
@queue.periodic(every=timedelta(seconds=1), name="backfilled", payload={"schedule": "backfilled"}, backfill=True)
@queue.task
def beat(payload, ctx):
    assert ctx.scheduled_at is not None


@queue.periodic(cron="* * * * * */2", name="cron-even-seconds", payload={"schedule": "cron-even-seconds"})
@queue.task
def cron_beat(payload, ctx):
    assert ctx.scheduled_at.second % 2 == 0
'''


@dataclass
class Worker:
    process: subprocess.Popen
    log: Path

    def up(self) -> bool:
        """The worker logs "serving" once its signal handlers are in place."""
        return "serving" in self.log.read_text(errors="replace")


class App:
    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.url = url
        self.engine = create_engine(url, poolclass=NullPool)
        self.started: list[Worker] = []
        (root / "schedapp.py").write_text(APP)

    def start(self) -> Worker:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
        env.update(APP_DATABASE_URL=self.url, PYTHONUNBUFFERED="1", SQLA_QUEUE_DISABLE_PLUGIN_AUTOLOAD="1")
        log = self.root / f"worker-{len(self.started) + 1}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [SCRIPT, "--app", "schedapp:queue", "worker", "--lease", "5", "--grace", "2"],
                cwd=self.root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        self.started.append(Worker(process, log))
        return self.started[-1]

    def ticks(self) -> Counter:
        """How many jobs each (schedule, tick) got."""
        with self.engine.connect() as conn:
            rows = conn.execute(text("SELECT payload->>'schedule', scheduled_at FROM sqla_queue_jobs")).all()
        return Counter((name, tick) for name, tick in rows)

    def of(self, schedule: str) -> list[datetime]:
        return sorted(tick for name, tick in self.ticks() if name == schedule)

    def wait_for(self, predicate, what: str, timeout: float = 60) -> None:
        give_up = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < give_up, f"timed out waiting for {what}\n{self.logs()}"
            time.sleep(0.1)

    def logs(self) -> str:
        return "\n".join(f"--- {w.log.name}\n{w.log.read_text(errors='replace')[-3000:]}" for w in self.started)

    def stop(self, workers: list[Worker]) -> None:
        """SIGTERM once every worker is up (one still starting has no handler for it yet);
        each exits cleanly."""
        self.wait_for(lambda: all(w.up() for w in workers), "every worker to be up")
        for worker in workers:
            worker.process.send_signal(signal.SIGTERM)
        for worker in workers:
            assert worker.process.wait(timeout=30) == 0, self.logs()


@pytest.fixture
def app(tmp_path, create_database):
    app = App(tmp_path, create_database())
    yield app
    for worker in app.started:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait(timeout=10)
    app.engine.dispose()


def contiguous(ticks: list[datetime], step: timedelta) -> bool:
    return all(b - a == step for a, b in zip(ticks, ticks[1:]))


def test_three_workers_enqueue_each_tick_once_through_a_kill_and_a_pause(app):
    workers = [app.start() for _ in range(WORKERS)]
    app.wait_for(lambda: len(app.of("every-second")) >= 2, "the first ticks")
    live_from = datetime.now(UTC)

    # SIGKILL one worker mid-run, and restart it.
    time.sleep(3)
    victim = workers[0]
    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait(timeout=10)
    workers[0] = app.start()
    app.wait_for(lambda: datetime.now(UTC) - live_from >= 10 * SECOND, "ten seconds of ticks")

    # All workers stop; nobody runs for 5 s; they come back.
    app.stop(workers)
    stopped = datetime.now(UTC)
    before_pause = app.ticks()
    time.sleep(5)
    restarted = datetime.now(UTC)
    workers = [app.start() for _ in range(WORKERS)]
    app.wait_for(lambda: any(t > restarted + 2 * SECOND for t in app.of("every-second"))
                 and any(t > restarted + 2 * SECOND for t in app.of("cron-even-seconds")), "ticks after the restart")
    app.stop(workers)

    counts = app.ticks()
    # Exactly once per (schedule, tick), across kills, restarts and the pause.
    assert set(counts.values()) == {1}, sorted(key for key, n in counts.items() if n > 1)
    every, backfilled, cron = app.of("every-second"), app.of("backfilled"), app.of("cron-even-seconds")
    assert all(t.microsecond == 0 for t in every + backfilled + cron)
    assert all(t.second % 2 == 0 for t in cron)
    # Enough ticks that the run meant something: ten seconds before the pause.
    live = [t for t in every if live_from <= t <= stopped]
    assert len(live) >= 5 and len([t for t in cron if live_from <= t <= stopped]) >= 3

    # The pause: nothing was enqueued for it without backfill...
    gap = lambda ticks: [t for t in ticks if stopped < t <= restarted]  # noqa: E731
    assert gap(every) == [] and gap(cron) == []
    assert min(t for t in every if t > stopped) > restarted  # resumed with the first tick after the restart
    # ...and every tick of it with backfill: that schedule has no hole from its first tick to its last.
    assert len(gap(backfilled)) >= 4
    assert contiguous(backfilled, SECOND), [b for a, b in zip(backfilled, backfilled[1:]) if b - a != SECOND]
    assert sum(1 for name, _ in before_pause if name == "backfilled") < len(backfilled)
    print(f"\nperiodic workers: every-second {len(every)} ticks, backfilled {len(backfilled)} "
          f"({len(gap(backfilled))} in the 5 s pause), cron-even-seconds {len(cron)}; no duplicate")
