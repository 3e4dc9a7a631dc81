"""The SIGKILL storm the crash tests share: kill worker processes at random, replace each at once,
then stop the survivors gracefully. The tests check what the storm left in the database."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sqla_queue.worker.slots import PREFETCH_PER_HANDLER

if TYPE_CHECKING:
    from conftest import FaultApp, WorkerProcess


def most_held(concurrency: int) -> int:
    """The most jobs a worker with the default (adaptive) prefetch holds: its handlers' and its
    buffer's. A fault can re-run at most these: started or finished, none of them committed."""
    return concurrency * (1 + PREFETCH_PER_HANDLER)


def sigkill_storm(app: FaultApp, running: list[WorkerProcess], rng: random.Random, *, kills: int,
                  options: tuple[str, ...]) -> list[int]:
    """SIGKILL a random one of `running` `kills` times, 0.5 to 1 s apart, replacing each victim
    at once with a fresh worker started with `options` (in place, in `running`). Returns the
    number of completed jobs at each kill."""
    completed_at_kill: list[int] = []
    while len(completed_at_kill) < kills:
        time.sleep(rng.uniform(0.5, 1.0))  # pacing the kills, not synchronising
        victim = rng.choice(running)
        victim.signal(signal.SIGKILL)
        victim.process.wait(timeout=10)
        completed_at_kill.append(app.completed())
        running[running.index(victim)] = app.start_worker(*options)
    return completed_at_kill


def stop_gracefully(app: FaultApp, running: list[WorkerProcess]) -> None:
    """SIGTERM every worker once it is up; each must exit 0."""
    # A worker restarted by the last kill may still be starting; SIGTERM before its handlers are
    # installed would kill it outright. The worker logs "serving" once it is up.
    app.wait_until(lambda: all("serving" in worker.log() for worker in running), 60, "every worker to be up")
    for worker in running:
        worker.signal(signal.SIGTERM)
    for worker in running:
        try:
            code = worker.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            # The workers run with PYTHONFAULTHANDLER: SIGABRT writes every thread's stack to
            # the worker's log, which says where it hung.
            worker.signal(signal.SIGABRT)
            worker.process.wait(timeout=10)
            pytest.fail(f"{worker.name} did not exit within 30 s of SIGTERM:\n{app.logs(chars=20_000)}")
        assert code == 0, app.logs()


def storm(app: FaultApp, *, jobs: int, workers: int, concurrency: int, kills: int,
          options: tuple[str, ...]) -> tuple[dict[str, Any], list[int], list[WorkerProcess]]:
    """With `jobs` enqueued: start `workers` workers (`options` give them `concurrency` slots),
    SIGKILL them `kills` times once work has started, wait for every job to complete and check
    `FaultApp.check_invariants` (re-runs bounded by what each kill held, `most_held`). Returns the
    figures, the completed count at each kill and the workers still running."""
    seed = random.randrange(1 << 30)
    running = [app.start_worker(*options) for _ in range(workers)]
    app.wait_until(lambda: app.started() > 0, 30, "the first job to start")
    completed_at_kill = sigkill_storm(app, running, random.Random(seed), kills=kills, options=options)
    # The kills must have landed while there was work to lose.
    assert completed_at_kill[-1] < jobs, f"the work ended before the last kill: {completed_at_kill}"
    app.wait_all_completed(jobs, timeout=120)
    figures: dict[str, Any] = app.check_invariants(jobs, max_duplicates=most_held(concurrency) * kills)
    figures.update(kills=kills, seed=seed, workers=workers, concurrency=concurrency)
    return figures, completed_at_kill, running


def report(title: str, figures: dict[str, Any], completed_at_kill: list[int], path: Path) -> None:
    """Print the figures and write them to `path` (kept for the closing notes)."""
    line = ", ".join(f"{key}={value}" for key, value in figures.items())
    print(f"\n{title}: {line}")
    print(f"completed jobs at each kill: {completed_at_kill}")
    path.write_text(f"{line}\ncompleted at each kill: {completed_at_kill}\n")
