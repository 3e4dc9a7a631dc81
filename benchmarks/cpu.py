"""CPU time of the PostgreSQL server processes over a measured span (embedded server only).

Summed over the postmaster's children (backends, walwriter, checkpointer, autovacuum), live and
exited: a worker closes its connections when its run ends, before the parent reads the end
sample, and the postmaster reaps each backend that exits, so an exited backend's CPU time is in
the postmaster's own children times. A span's CPU is the change in live plus reaped time.
"""

from __future__ import annotations

import psutil

from .server import Database


class ServerCpu:
    def __init__(self, db: Database) -> None:
        self.postmaster = None
        if db.embedded:
            with db.connect() as conn:  # the backend is asked for its parent while it is alive
                backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
                try:
                    self.postmaster = psutil.Process(backend).parent()
                except psutil.Error:
                    self.postmaster = None

    def sample(self) -> float | None:
        """Seconds of CPU used so far by the postmaster's children, exited ones included."""
        if self.postmaster is None:
            return None
        try:
            own = self.postmaster.cpu_times()
        except psutil.Error:
            return None
        total = own.children_user + own.children_system
        for proc in self.postmaster.children():
            try:
                cpu = proc.cpu_times()
            except psutil.Error:  # exited since the list was read: reaped, counted next sample
                continue
            total += cpu.user + cpu.system
        return total

    @staticmethod
    def seconds_between(start: float | None, end: float | None) -> float | None:
        if start is None or end is None:
            return None
        return end - start
