"""The SIGKILL storm the crash tests share: kill worker processes at random, replace each at once,
then stop the survivors gracefully. The tests check what the storm left in the database."""

from __future__ import annotations

import random
import signal
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import FaultApp, WorkerProcess


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
        assert worker.process.wait(timeout=30) == 0, app.logs()
