"""The server CPU per job of sections 3 and 11: a worker closes its connections when its run
ends, before the parent's end sample, so the CPU of backends that exited inside the span must
still count (it was lost, and the drains reported 0-1 µs of server CPU per job)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root holds benchmarks/

from benchmarks.cpu import ServerCpu  # noqa: E402
from benchmarks.server import Database  # noqa: E402


def test_the_cpu_of_a_backend_that_exited_inside_the_span_counts(create_database):
    url = make_url(create_database()).set(drivername="postgresql").render_as_string(hide_password=False)
    db = Database(url=url, embedded=True, bin_dir=None)  # a local server: its processes are readable
    cpu = ServerCpu(db)
    start = cpu.sample()
    assert start is not None  # the postmaster was found

    with db.connect() as conn:
        backend = psutil.Process(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
        conn.execute("SELECT count(*) FROM generate_series(1, 3000000)").fetchone()
        used = sum(backend.cpu_times()[:2])
    deadline = time.monotonic() + 10
    while backend.is_running() and backend.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.01)  # the backend exits once its client has gone; the postmaster reaps it
    time.sleep(0.1)

    spent = ServerCpu.seconds_between(start, cpu.sample())
    assert used > 0.05  # the query made the backend work
    assert spent >= used * 0.9
