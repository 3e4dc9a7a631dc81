"""The OpenTelemetry cost section run for real against PostgreSQL at a size that proves only that
both drains run, the plugin in one of them and not the other, and that the report reads what the
section returns. No timing is asserted: the figures mean nothing at this size."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root holds benchmarks/

from benchmarks import otel, report, tables  # noqa: E402
from benchmarks.__main__ import DEFAULT_SECTIONS  # noqa: E402
from benchmarks.server import Database  # noqa: E402
from benchmarks.sizes import SIZES  # noqa: E402


def test_the_otel_section_drains_with_and_without_the_plugin(create_database):
    url = make_url(create_database()).set(drivername="postgresql").render_as_string(hide_password=False)
    db = Database(url=url, embedded=False, bin_dir=None)
    logged: list[str] = []

    out = otel.run(db, replace(SIZES["tiny"], repeat=2, drain_jobs=40), logged.append)

    assert (out["processes"], out["concurrency"], out["jobs"]) == (1, 10, 40)
    for side in ("plain", "otel"):
        assert out[side]["jobs_per_s"]["n"] == out[side]["client_cpu_us_per_job"]["n"] == 2
    assert out["ratio"]["n"] == 2
    assert tables.counts(db) == {"completed": 40}
    assert not [line for line in logged if "WARNING" in line]
    assert "otel" in DEFAULT_SECTIONS
    text = report._otel_section(json.loads(json.dumps({"otel": out})))
    assert text[0] == "## 13. The OpenTelemetry plugin's cost"
    assert any(line.startswith("| No-op drain, jobs/s |") for line in text)


def test_without_the_plugin_the_section_says_what_to_install():
    text = report._otel_section({"otel": {"skipped": "sqla_queue_opentelemetry not installed: pip install ..."}})
    assert text == ["## 13. The OpenTelemetry plugin's cost", "",
                    "Not measured: sqla_queue_opentelemetry not installed: pip install ....", ""]
