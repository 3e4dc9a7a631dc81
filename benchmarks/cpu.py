"""CPU time of the PostgreSQL server processes over a measured span (embedded server only).

Summed over the postmaster's children (backends, walwriter, checkpointer, autovacuum). A backend
that exits inside the span takes its CPU time with it, which is why worker processes stay alive
until the parent has read the end sample.
"""

from __future__ import annotations

import psutil

from .server import Database


class ServerCpu:
    def __init__(self, db: Database) -> None:
        self.postmaster = None
        if db.embedded:
            with db.connect() as conn:
                backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            try:
                self.postmaster = psutil.Process(backend).parent()
            except psutil.Error:
                self.postmaster = None

    def sample(self) -> dict[int, float] | None:
        if self.postmaster is None:
            return None
        times = {}
        for proc in self.postmaster.children():
            try:
                cpu = proc.cpu_times()
                times[proc.pid] = cpu.user + cpu.system
            except psutil.Error:
                continue
        return times

    @staticmethod
    def seconds_between(start: dict[int, float] | None, end: dict[int, float] | None) -> float | None:
        if start is None or end is None:
            return None
        return sum(cpu - start.get(pid, 0.0) for pid, cpu in end.items())
