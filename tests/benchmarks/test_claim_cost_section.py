"""The claim-cost section run for real against PostgreSQL at a tiny size: every row is measured
(small and large backlog, then the large one with priorities in use beside one without), the
claims really took the highest priority first, and the report and the targets read what it
returns. No timing is asserted: the figures mean nothing at this size.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root holds benchmarks/

from benchmarks import claim_cost, raw_sql, report, targets  # noqa: E402
from benchmarks.server import Database  # noqa: E402
from benchmarks.sizes import SIZES  # noqa: E402

PENDING_BY_PRIORITY = f"""
SELECT queue_name, priority, count(*) FILTER (WHERE status = 'pending') AS pending, count(*) AS total
FROM {raw_sql.TABLE} GROUP BY queue_name, priority ORDER BY queue_name, priority
"""


def test_the_claim_cost_section_measures_priorities_beside_one_priority(create_database):
    url = make_url(create_database()).set(drivername="postgresql").render_as_string(hide_password=False)
    db = Database(url=url, embedded=False, bin_dir=None)
    size = replace(SIZES["tiny"], repeat=2, claim_small_backlog=300, claim_large_backlog=3_000,
                   claim_history=1_000, claim_samples=20)
    logged: list[str] = []

    out = claim_cost.run(db, size, logged.append)

    p = out["priorities"]
    assert p["backlog"] == 3_000 and p["priorities"] == [-1, 0, 5]
    for key in ("plain", "mixed"):
        assert p[key]["ours_us"]["n"] == p[key]["raw_us"]["n"] == 2 and p[key]["buffers"] > 0
    assert p["ratio"]["n"] == p["raw_ratio"]["n"] == 2
    with db.connect() as conn:
        rows = {(q, prio): (pending, total) for q, prio, pending, total in conn.execute(PENDING_BY_PRIORITY)}
    # Emptied and filled again for the comparison: the history, and 3,000 pending jobs per queue.
    # 2 repetitions x (20 + 5 warm-up) claims by sqla_queue and as many raw ones, per queue: on
    # the queue with priorities every one of them took a priority-5 job.
    assert rows.pop((raw_sql.QUEUE, 0)) == (0, 1_000)
    assert rows == {(claim_cost.ONE_PRIORITY_QUEUE, 0): (3_000 - 100, 3_000),
                    (claim_cost.PRIORITY_QUEUE, -1): (1_000, 1_000), (claim_cost.PRIORITY_QUEUE, 0): (1_000, 1_000),
                    (claim_cost.PRIORITY_QUEUE, 5): (1_000 - 100, 1_000)}
    assert not [line for line in logged if "WARNING" in line]

    results = json.loads(json.dumps({"claim_cost": out}))  # as --render reads it back
    assert targets.priorities_row(results)["met"] is not None
    text = "\n".join(report._claim_cost_section(results))
    assert "| 3,000, priorities -1, 0, 5 |" in text and "| with / without priorities |" in text
