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
        """Seconds of CPU used so far by the postmaster's children, exited ones included.

        A backend reaped between reading the postmaster's children times and listing the live
        children would be in neither, and one reaped after the listing in both; so the reaped
        times are read before and after the live ones, and the read is taken again until no
        backend was reaped in between (connections close all at once when a run ends)."""
        if self.postmaster is None:
            return None
        for _ in range(_READS):
            try:
                before = _reaped(self.postmaster)
                live = sum(_own(proc) for proc in self.postmaster.children())
                if _reaped(self.postmaster) == before:
                    return before + live
            except psutil.Error:
                return None
        return None

    @staticmethod
    def seconds_between(start: float | None, end: float | None) -> float | None:
        if start is None or end is None:
            return None
        return end - start


_READS = 100  # tries at a read no reaping interleaved with, before giving up (None)


def _reaped(postmaster: psutil.Process) -> float:
    own = postmaster.cpu_times()
    return own.children_user + own.children_system


def _own(proc: psutil.Process) -> float:
    """A live (or exited, not yet reaped) backend's CPU; 0 for one gone before it was read: it was
    reaped, which the second read of the reaped times notices."""
    try:
        cpu = proc.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return cpu.user + cpu.system
