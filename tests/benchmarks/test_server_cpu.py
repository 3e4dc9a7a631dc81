"""The benchmark's server CPU sampler (benchmarks/cpu.py) on a real server: what backends that
closed between two samples used is in the difference, however their exits and the samples
interleave."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import psutil
import psycopg
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.cpu import ServerCpu  # noqa: E402
from benchmarks.server import Database  # noqa: E402

BURN = "SELECT count(*) FROM generate_series(1, 300000)"


def burn_and_close(url: str, used: list[float]) -> None:
    """One connection's CPU work; its backend's own CPU, read just before it closes."""
    with psycopg.connect(url) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        for _ in range(5):
            conn.execute(BURN)
        cpu = psutil.Process(pid).cpu_times()
        used.append(cpu.user + cpu.system)


def test_backends_that_closed_between_the_samples_are_counted(create_database):
    url = make_url(create_database()).set(drivername="postgresql").render_as_string(hide_password=False)
    db = Database(url=url, embedded=True, bin_dir=None)
    sampler = ServerCpu(db)
    used: list[float] = []
    start = sampler.sample()
    for _ in range(10):  # waves of connections closing together, as workers do when a run ends
        wave = [threading.Thread(target=burn_and_close, args=(url, used)) for _ in range(8)]
        for thread in wave:
            thread.start()
        for thread in wave:
            thread.join()
    end = sampler.sample()
    assert start is not None and end is not None
    assert len(used) == 80
    assert end - start >= 0.95 * sum(used), (end - start, sum(used))
