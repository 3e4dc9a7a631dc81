"""The asyncio section run for real against PostgreSQL, at a size that proves only that every row
is measured (async enqueue, async no-op drain, the sleep(0.1) drain) and that the report and the
targets read what it returns. No timing is asserted: the figures mean nothing at this size.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root holds benchmarks/

from benchmarks import asyncio_rows, report, tables, targets  # noqa: E402
from benchmarks.server import Database  # noqa: E402
from benchmarks.sizes import SIZES  # noqa: E402


def test_the_asyncio_section_measures_every_row(create_database):
    url = make_url(create_database()).set(drivername="postgresql").render_as_string(hide_password=False)
    db = Database(url=url, embedded=False, bin_dir=None)
    size = replace(SIZES["tiny"], repeat=1, enqueue_many_total=2_000, drain_jobs=40, asyncio_sleep_jobs=150)
    logged: list[str] = []

    out = asyncio_rows.run(db, size, logged.append, drain_concurrency=(10,))

    enq = out["enqueue_many"]
    assert enq["jobs"] == 2_000
    for engine in ("url", "engine"):  # a Queue from a URL; on the application's Engine / AsyncEngine
        assert enq[engine]["sync"]["n"] == enq[engine]["async"]["n"] == enq[engine]["ratio"]["n"] == 1
    drain = out["drain"]["1x10"]
    assert drain["jobs"] == 40 and drain["incomplete"] is False
    assert drain["sync"]["jobs_per_s"]["n"] == drain["async"]["jobs_per_s"]["n"] == 1
    sleep = out["sleep"]
    assert sleep["completed"] == 150 and sleep["incomplete"] is False and sleep["concurrency"] == 100
    assert tables.counts(db) == {"completed": 150}
    assert not [line for line in logged if "WARNING" in line]

    results = json.loads(json.dumps({"asyncio": out}))  # as --render reads it back
    assert all(row["met"] is not None for row in targets.asyncio_rows(results))
    text = report._asyncio_section(results)
    assert sum(line.startswith("| enqueue_many(1,000) vs enqueue_many_async(1,000)") for line in text) == 2
    assert any(line.startswith("| No-op drain, 1 process x concurrency 10 (40 jobs)") for line in text)
