"""A section that ends with a connection still open to the benchmark's database makes every later
drain wait 10 s for that backend to exit before reading the server's counters, and count what it
reported late. The enqueue section (whose last wake-up may still be on the notifier's thread when
it disposes its engine) and fleet's peak-connection sampler are the two that did."""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root holds benchmarks/

from benchmarks import enqueue, fleet, raw_sql  # noqa: E402
from benchmarks.server import Database  # noqa: E402
from benchmarks.sizes import SIZES  # noqa: E402


def database(create_database) -> Database:
    url = make_url(create_database()).set(drivername="postgresql").render_as_string(hide_password=False)
    return Database(url=url, embedded=False, bin_dir=None)


def others_after(db: Database, seconds: float) -> int:
    """The backends the drains' server counters would wait for, `seconds` from now."""
    time.sleep(seconds)
    with db.connect() as conn:
        return conn.execute(raw_sql.OTHER_BACKENDS).fetchone()[0]


def test_the_enqueue_section_leaves_no_connection_open(create_database):
    """In a whole run a wake-up still on the notifier's thread when the section disposed its
    engine left one open (a race this test does not force: it checks the end state)."""
    db = database(create_database)
    enqueue.run(db, replace(SIZES["tiny"], repeat=1), lambda _: None)
    assert others_after(db, 0.5) == 0  # the notifier's last send (10 ms after the last enqueue) is long done


def test_the_fleet_sampler_is_not_a_backend_the_counters_wait_for(create_database):
    db = database(create_database)
    with fleet.PeakConnections(db) as peak:
        with db.connect():  # a worker's connection, which the sampler counts
            time.sleep(0.2)
        assert others_after(db, 0.0) == 0
    assert peak.value >= 1
