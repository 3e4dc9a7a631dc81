"""Section 13, the OpenTelemetry plugin's cost: the no-op drain of section 3 (one worker process
at concurrency 10) with the ``opentelemetry`` plugin enabled and the OpenTelemetry SDK set up
(a ``BatchSpanProcessor`` whose exporter drops every span, metrics aggregated by an in-memory
reader), against the same drain without the plugin, back to back in each repetition (which goes
first alternates), so a ratio compares two runs that shared the machine's state.

The pre-filled jobs carry no trace context (they were not enqueued through the plugin), so each
attempt's ``process`` span starts a trace of its own; the worker also records a ``claim`` or
``complete`` span per batch and the lifecycle metrics. The enqueue side's ``send`` spans are not
in this figure.
"""

from __future__ import annotations

import importlib.util

from .drain import drain_once
from .server import Database
from .sizes import Size
from .stats import summary

PROCESSES, CONCURRENCY = 1, 10


def available() -> str | None:
    """None when the plugin and the SDK are installed, else what is missing."""
    missing = [name for name in ("sqla_queue_opentelemetry", "opentelemetry.sdk")
               if importlib.util.find_spec(name.split(".")[0]) is None
               or (name == "opentelemetry.sdk" and importlib.util.find_spec(name) is None)]
    if not missing:
        return None
    return (f"{' and '.join(missing)} not installed: pip install -e 'plugins/sqla-queue-opentelemetry[test]' "
            "(which brings opentelemetry-sdk)")


def run(db: Database, size: Size, log) -> dict:
    missing = available()
    if missing is not None:
        log(f"OpenTelemetry section not run: {missing}")
        return {"skipped": missing}
    runs: dict[str, list[dict]] = {"plain": [], "otel": []}
    ratios = []
    for rep in range(size.repeat):
        order = ("plain", "otel") if rep % 2 == 0 else ("otel", "plain")
        for side in order:
            runs[side].append(drain_once(db, size.drain_jobs, PROCESSES, CONCURRENCY, log=log, otel=side == "otel"))
        plain, otel = runs["plain"][-1], runs["otel"][-1]
        if "opentelemetry" not in otel["plugins"] or "opentelemetry" in plain["plugins"]:
            raise RuntimeError(f"the drains did not run the plugins they should: {plain['plugins']} / {otel['plugins']}")
        ratios.append(otel["jobs_per_s"] / plain["jobs_per_s"])
        log(f"otel drain rep {rep + 1}: without {plain['jobs_per_s']:,.0f} jobs/s, with the plugin "
            f"{otel['jobs_per_s']:,.0f} jobs/s ({ratios[-1]:.0%}); client CPU {plain['client_cpu_us_per_job']:.0f} "
            f"/ {otel['client_cpu_us_per_job']:.0f} µs/job")
    return {
        "processes": PROCESSES, "concurrency": CONCURRENCY, "jobs": size.drain_jobs,
        **{side: {name: summary([o[name] for o in outs]) for name in ("jobs_per_s", "client_cpu_us_per_job")}
           for side, outs in runs.items()},
        "ratio": summary(ratios),
    }
