"""Section 11, many workers on one database: 20 worker processes of concurrency 2 beside 2 of
concurrency 10 (the same 20 handler slots), draining the same pre-enqueued no-op jobs.

Each drain is section 3's (`drain.drain_once`: rate from the rows, commits, WAL and CPU per
job), plus what a fleet costs the database: the connections open to it at the peak of the
drain (sampled every 50 ms from pg_stat_activity), and the claims that found nothing while jobs
were pending because other workers held the due rows (the ``empty_locked`` counter that `stats`
reports): claim contention. The idle cost of 20 workers is section 7's. What these figures mean
for sizing is in docs/explanation/scaling.md.
"""

from __future__ import annotations

import threading

from . import raw_sql
from .drain import drain_once
from .raw_sql import TABLE
from .server import Database
from .sizes import Size
from .stats import summary

def layouts(size: Size) -> tuple[tuple[int, int], ...]:
    """2 x 10 and the size's fleet at concurrency 2 (20 processes, 4 at ``tiny``)."""
    return ((2, 10), (size.fleet_processes, 2))

CONNECTIONS = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
EMPTY_LOCKED = f"SELECT coalesce(sum(events), 0) FROM {TABLE}_counters WHERE kind = 'empty_locked'"


def run(db: Database, size: Size, log) -> dict:
    runs: dict[str, list[dict]] = {f"{p}x{c}": [] for p, c in layouts(size)}
    for rep in range(size.repeat):
        for processes, concurrency in layouts(size):
            with PeakConnections(db) as peak:
                out = drain_once(db, size.drain_jobs, processes, concurrency, log=log)
            with db.connect() as conn:
                out["empty_locked_per_1000"] = conn.execute(EMPTY_LOCKED).fetchone()[0] * 1000 / max(1, out["jobs"])
            out["peak_connections"] = peak.value
            runs[f"{processes}x{concurrency}"].append(out)
            log(f"fleet {processes} proc x concurrency {concurrency} rep {rep + 1}: {out['jobs_per_s']:,.0f} jobs/s, "
                f"{out['commits_per_job']:.2f} commits/job, peak {peak.value} connections, "
                f"{out['empty_locked_per_1000']:.1f} claims found the due jobs locked per 1,000 jobs")
    fields = ("jobs_per_s", "commits_per_job", "server_cpu_us_per_job", "client_cpu_us_per_job",
              "peak_connections", "empty_locked_per_1000", "batch")
    return {key: {"processes": int(key.split("x")[0]), "concurrency": int(key.split("x")[1]),
                  "jobs": outs[0]["jobs"],
                  **{name: summary([o[name] for o in outs if o[name] is not None]) for name in fields}}
            for key, outs in runs.items()}


class PeakConnections:
    """The most connections open to the benchmark's database while the block runs."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.value = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakConnections:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        # Named, so that the drain's server counters do not wait for it to exit (`raw_sql.OBSERVER`).
        with self.db.connect(autocommit=True, application_name=raw_sql.OBSERVER) as conn:
            while not self._stop.wait(0.05):
                self.value = max(self.value, conn.execute(CONNECTIONS).fetchone()[0])
