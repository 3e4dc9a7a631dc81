"""The benchmark's pure pieces: statistics, pgbench parsing, targets, report rendering.

No database and no timing: the benchmark is an instrument, not a test. CI runs the
instrument itself once at ``--size tiny`` (.ci/run) so it cannot rot; this file checks shapes.
The figures below are made up for the rendering and prove nothing about speed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root holds benchmarks/

from benchmarks import idle, raw_sql, report, stats, targets  # noqa: E402
from benchmarks.__main__ import DEFAULT_SECTIONS, SECTIONS, parse_args  # noqa: E402
from benchmarks.pgbench import parse_output  # noqa: E402
from benchmarks.sizes import SIZES, raw_jobs_for  # noqa: E402

PGBENCH_OUTPUT = """\
pgbench (18.6)
transaction type: /tmp/sqlaq-pgbench-x/script.sql
scaling factor: 1
query mode: prepared
number of clients: 4
number of threads: 1
maximum number of tries: 1
number of transactions per client: 250
number of transactions actually processed: 1000/1000
number of failed transactions: 0 (0.000%)
latency average = 1.843 ms
initial connection time = 7.311 ms
tps = 2170.392113 (without initial connection time)
"""


def test_summary_gives_median_and_range():
    s = stats.summary([3.0, 1.0, 2.0, 10.0])
    assert (s["median"], s["min"], s["max"], s["n"]) == (2.5, 1.0, 10.0, 4)
    assert stats.summary([])["median"] is None


def test_percentile_interpolates_like_numpy():
    values = list(range(1, 101))
    assert stats.percentile(values, 50) == 50.5
    assert stats.percentile(values, 0) == 1 and stats.percentile(values, 100) == 100
    assert stats.percentile([5.0], 99) == 5.0
    with pytest.raises(ValueError):
        stats.percentile([], 50)


def test_window_rates_drop_the_partial_window():
    samples = [(0.0, 0), (5.0, 500), (10.0, 1000), (15.0, 1200), (23.0, 1400)]
    rates = stats.window_rates(samples, 10.0)
    # 0-10 s and 10-20 s (the count at 20 s is interpolated: 1,325); 20-23 s is partial
    assert rates == [100.0, pytest.approx(32.5)]


def test_pgbench_output_is_parsed():
    out = parse_output(PGBENCH_OUTPUT)
    assert out["clients"] == 4 and out["transactions"] == 1000 and out["failed"] == 0
    assert out["tps"] == pytest.approx(2170.392113)
    assert out["query_mode"] == "prepared"


def test_pgbench_output_without_tps_is_an_error():
    with pytest.raises(ValueError, match="no tps"):
        parse_output("pgbench: error: connection to server failed\n")


def test_pgbench_scripts_use_variables_and_gset():
    script = raw_sql.pgbench_script(raw_sql.PGBENCH_CLAIM_AND_COMPLETE)
    assert "%(" not in script
    assert ":batch" in script and ":tok" in script and "\\gset" in script
    assert "FOR UPDATE SKIP LOCKED" in script and "claim_token = :tok" in script
    multi = raw_sql.pgbench_enqueue_script(100)
    assert multi.count("('bench', 'noop',") == 100  # literals: pgbench caps variable references


def test_every_size_runs_every_section_and_full_is_the_issues():
    for size in SIZES.values():
        assert size.drain_jobs > 0 and size.sustained_jobs > 0 and size.latency_jobs > 0
        assert size.claim_large_backlog > size.claim_small_backlog
        assert 1 in size.idle_workers and len(size.idle_workers) >= 2 and size.idle_window > 0
        assert size.peers_latency_jobs > 0
    full = SIZES["full"]
    assert full.drain_jobs == 20_000 and full.repeat >= 3 and full.latency_jobs >= 100
    assert full.idle_workers == (1, 20) and SIZES["small"].idle_workers == (1, 20)
    assert full.claim_large_backlog == 1_000_000 and full.sustained_jobs == 1_000_000
    assert all(size.asyncio_sleep_jobs == 1_000 for size in SIZES.values())  # the issue's 1,000 x sleep(0.1)
    assert SIZES["tiny"].repeat == 1


def test_raw_jobs_interpolate_between_configured_batches():
    size = SIZES["full"]
    assert raw_jobs_for(size, 1) == size.raw_jobs[1]
    assert size.raw_jobs[10] < raw_jobs_for(size, 50) < size.raw_jobs[100]
    assert raw_jobs_for(size, 1000) == size.raw_jobs[100]


def _stat(*values):
    return stats.summary(values)


def fake_results() -> dict:
    """A results dict with the shape the benchmark writes (numbers invented)."""
    drain = {}
    for p in (1, 2):
        for c in (1, 10):
            drain[f"{p}x{c}"] = {
                "processes": p, "concurrency": c, "jobs": 20_000,
                "jobs_per_s": _stat(1000 * p * c, 1100 * p * c, 900 * p * c),
                "batch": _stat(float(c)), "commits_per_job": _stat(2.0 / c),
                "wal_bytes_per_job": _stat(900.0), "client_cpu_us_per_job": _stat(120.0),
                "server_cpu_us_per_job": _stat(80.0), "seconds": _stat(10.0),
            }
    variant = {
        "options": None, "prune": False, "vacuum_each_window": False,
        "first": _stat(5000.0), "last": _stat(3000.0), "last_over_first": _stat(0.6),
        "overall": _stat(4000.0), "windows": [5000.0, 4000.0, 3000.0], "completed": 120_000,
        "seconds": 30.0, "capped": True, "pruned": 0, "vacuums": 0,
        "end": {"table_bytes": 2**27, "indexes_bytes": 2**26, "pending_index_bytes": 2**24,
                "n_live_tup": 1, "n_dead_tup": 2, "autovacuum_count": 0, "vacuum_count": 1},
    }
    return {
        "meta": {"command": "python -m benchmarks --size tiny", "size": "tiny", "repeat": 3,
                 "started": "2026-01-01 00:00 UTC", "finished": "2026-01-01 00:30 UTC", "duration_s": 1800.0,
                 "load_start": [1.0, 1.0, 1.0], "load_end": [2.0, 2.0, 2.0], "raw_methods": ["pgbench", "psycopg"],
                 "facts": {"cores": 2, "cpu_model": "cpu", "memory_gib": 8, "platform": "linux", "python": "3.11",
                           "postgres_version": "PostgreSQL 18.6", "server": "embedded", "pgbench": "/bin/pgbench",
                           "settings": {"server_version": "18.6", "fsync": "on"}}},
        "raw": {
            "claim": {m: {c: {b: _stat(2000.0 * b ** 0.5 * c) for b in (1, 10, 100)} for c in (1, 4)}
                      for m in ("pgbench", "psycopg")},
            "enqueue": {m: {r: _stat(5000.0 * r ** 0.6) for r in (1, 100, 1000)} for m in ("pgbench", "psycopg")},
        },
        "enqueue": {"single": _stat(4000.0), "many_100": _stat(50_000.0), "many_1000": _stat(70_000.0)},
        "drain": drain,
        "latency": {"p50_ms": _stat(2.0), "p99_ms": _stat(25.0), "call_p50_ms": _stat(3.0),
                    "call_p99_ms": _stat(30.0), "enqueue_call_ms": _stat(1.0), "samples_ms": [1.0, 2.0, 30.0],
                    "jobs": 200, "concurrency": 10},
        "claim_cost": {"history": 1_000_000,
                       "small": {"backlog": 10_000, "ours_us": _stat(500.0), "raw_us": _stat(200.0), "buffers": 6},
                       "large": {"backlog": 1_000_000, "ours_us": _stat(600.0), "raw_us": _stat(250.0), "buffers": 8},
                       "priorities": fake_priorities()},
        "sustained": {"default": variant, "autovacuum": {**variant, "last_over_first": _stat(0.9)},
                      "_config": {"processes": 2, "concurrency": 10, "jobs": 1_000_000, "window_s": 10.0,
                                  "max_seconds": 90.0, "autovacuum_options": "x = 0"}},
        "roundtrips": {"drain": [{"statement": "COMMIT", "calls": 10, "per_job": 0.5}]},
        "asyncio": fake_asyncio(),
        "fleet": {key: {"processes": p, "concurrency": c, "jobs": 1000,
                        **{name: stats.summary([value]) for name, value in (
                            ("jobs_per_s", 5000.0 / p), ("commits_per_job", 1.0), ("server_cpu_us_per_job", 90.0),
                            ("client_cpu_us_per_job", 200.0), ("peak_connections", 4.0 * p),
                            ("empty_locked_per_1000", 2.5), ("batch", float(c)))}}
                  for key, p, c in (("2x10", 2, 10), ("20x2", 20, 2))},
        "cpu": {"jobs": 600, "job_ms": 7.0, "concurrency": 4, "repeat": 3, "seconds": {"1": 5.0, "2": 2.8},
                "load": [0.4, 1.9], "cores": 2},
        "wakeups": {"enqueuers": 32, "seconds": 5.0, "layouts": {
            "32 processes x 1 thread": {"on": stats.summary([950.0]), "off": stats.summary([1000.0]),
                                        "caller_transaction": stats.summary([400.0])},
            "1 process x 32 threads": {"on": stats.summary([800.0]), "off": stats.summary([1000.0]),
                                       "caller_transaction": stats.summary([300.0])}}},
        "otel": {"processes": 1, "concurrency": 10, "jobs": 20_000,
                 "plain": {"jobs_per_s": _stat(8000.0), "client_cpu_us_per_job": _stat(100.0)},
                 "otel": {"jobs_per_s": _stat(6000.0), "client_cpu_us_per_job": _stat(160.0)},
                 "ratio": _stat(0.75)},
        "idle": {"settle_s": 12.0, "window_s": 30.0, "poll_interval_s": 1.0,
                 1: {"workers": 1, "seconds": 30.0, "commits": 90, "xact_per_s": 3.0, "xact_per_s_per_worker": 3.0,
                     "cpu_percent": _stat(0.3)},
                 20: {"workers": 20, "seconds": 30.0, "commits": 1800, "xact_per_s": 60.0,
                      "xact_per_s_per_worker": 3.0, "cpu_percent": _stat(0.3, 0.2, 0.5)}},
    }


def fake_priorities() -> dict:
    """Claim cost with priorities -1/0/5 in use beside one priority (numbers invented): 1.10x."""
    return {"backlog": 1_000_000, "priorities": [-1, 0, 5],
            "plain": {"ours_us": _stat(600.0), "raw_us": _stat(250.0), "buffers": 8},
            "mixed": {"ours_us": _stat(660.0), "raw_us": _stat(260.0), "buffers": 9},
            "ratio": _stat(1.1, 1.05, 1.15), "raw_ratio": _stat(1.04)}


def fake_asyncio() -> dict:
    """The asyncio section's shape (numbers invented): async enqueue at 90 % of sync on a Queue
    built from a URL and 85 % on the application's engines, the async 1 x 10 drain at 75 %, the
    sleep(0.1) drain in 1.2 s."""
    def drain(c, sync_rate, async_rate):
        side = lambda rate: {"jobs_per_s": _stat(rate), "batch": _stat(float(c)),  # noqa: E731
                             "client_cpu_us_per_job": _stat(100.0), "commits_per_job": _stat(0.2)}
        return {"processes": 1, "concurrency": c, "jobs": 20_000, "incomplete": False,
                "sync": side(sync_rate), "async": side(async_rate), "ratio": _stat(async_rate / sync_rate)}
    return {
        "enqueue_many": {"calls_of": 1000, "jobs": 50_000,
                         "url": {"sync": _stat(70_000.0), "async": _stat(63_000.0), "ratio": _stat(0.9, 0.88, 0.92)},
                         "engine": {"sync": _stat(60_000.0), "async": _stat(51_000.0), "ratio": _stat(0.85)}},
        "drain": {"1x10": drain(10, 8_000.0, 6_000.0), "1x50": drain(50, 9_000.0, 9_000.0)},
        "sleep": {"jobs": 1000, "concurrency": 100, "sleep_s": 0.1, "completed": 1000, "incomplete": False,
                  "seconds": _stat(1.2), "wall_seconds": _stat(1.5), "jobs_per_s": _stat(830.0)},
    }


def test_targets_are_judged_from_the_results():
    rows = {row["target"]: row for row in targets.evaluate(fake_results())}
    assert len(rows) == 26  # the peers' nine rows are there, not measured, when --peers was not given
    assert all(set(row) == {"target", "measured", "ratio", "met", "note", "why"} for row in rows.values())
    met = {name.split(" >=")[0].split(" <=")[0].split(" within")[0]: row["met"] for name, row in rows.items()}
    assert met["Drain, 1 process x concurrency 10"] is True  # 10,000 >= 6,000
    assert met["Idle wake-up latency p99"] is False  # 25 ms > 10 ms
    wake = rows["Enqueue with wake-ups on >= 90 % of wake-ups off, 32 concurrent single-job enqueuers"]
    assert wake["met"] is False and wake["measured"] == "80% (worst)"  # the one-process layout's 800 / 1,000
    assert wake["note"] == "worst layout: 1 process x 32 threads"
    assert met["Claim cost at 1,000,000 pending"] is True  # 1.2x
    assert rows["Sustained drain: last window >= 80 % of the first (default table)"]["met"] is False
    fed = [row for name, row in rows.items() if name.startswith("Sustained drain of ")]
    assert len(fed) == 1 and fed[0]["met"] is None  # the fed variant was not in these results
    client = rows["Client (worker) CPU per job, drain 1 process x concurrency 10 <= 45 µs"]
    server = rows["Server CPU per job, drain 1 process x concurrency 10 <= 55 µs"]
    assert (client["measured"], client["met"]) == ("120 µs", False)  # the 1 x 10 drain's median
    assert (server["measured"], server["met"]) == ("80 µs", False)


def test_drain_ratio_uses_the_raw_limit_at_the_batch_used():
    by_key = {row["key"]: row for row in targets.drain_ratios(fake_results())}
    row = by_key["1x10"]
    assert row["batch"] == 10
    assert row["limit"] == pytest.approx(2000 * 10 ** 0.5 * 4)  # best over methods and client counts
    assert row["ratio"] == pytest.approx(row["rate"] / row["limit"])


def test_report_renders_every_section_and_survives_json():
    results = fake_results()
    for data in (results, json.loads(json.dumps(results))):  # int keys come back as str
        text = report.render_markdown(data, "performance.png")
        for heading in ("## Targets", "## Machine and server", "## 1. The raw-SQL limit",
                        "## 2. sqla_queue enqueue", "## 3. Drain", "## 4. Idle wake-up latency",
                        "## 5. Claim cost against backlog", "## 6. Sustained drain", "## 7. Idle cost",
                        "## 8. asyncio", "## Where the time goes", "## 10. Wake-ups under concurrent enqueues",
                        "## 11. Many workers on one database", "## 12. CPU-bound handlers: one process or two",
                        "## 13. The OpenTelemetry plugin's cost"):
            assert heading in text
        assert "![performance plot](performance.png)" in text
        assert "**met**" in text and "**not met**" in text
        assert "1,100 (900–1,100)" in text or "1,000 (900–1,100)" in text  # median (min–max)
        assert "| 1 process x 32 threads | 800 /s | 1,000 /s | 80% | 300 /s | 30% |" in text
        assert "| 20 x 2 | 250 | 2.0 | 1.00 | 90 µs | 200 µs | 80 | 2.5 |" in text
        assert "| jobs/s | 120.0 | 214.3 | 1.79x |" in text
        assert "| No-op drain, jobs/s | 8,000 | 6,000 | 75% |" in text


def test_stat_formatting():
    assert report.fmt_stat(stats.summary([1.0, 2.0, 3.0])) == "2 (1–3)"
    assert report.fmt_stat(stats.summary([1500.0])) == "1,500"
    assert report.fmt_stat(None) == "–"


def test_plot_draws_a_png(tmp_path):
    from benchmarks import plot

    path = tmp_path / "performance.png"
    plot.draw(fake_results(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pgbench_progress_lines_are_parsed():
    from benchmarks.pgbench import parse_progress

    stderr = ("pgbench: starting vacuum...\n"
              "progress: 10.0 s, 2047.9 tps, lat 1.951 ms stddev 0.870, 0 failed\n"
              "progress: 20.0 s, 1204.1 tps, lat 3.321 ms stddev 1.020, 0 failed\n")
    assert parse_progress(stderr) == [(10.0, 2047.9), (20.0, 1204.1)]


def test_a_paired_raw_run_is_the_drains_denominator():
    results = fake_results()
    results["drain"]["2x10"]["raw_paired"] = {"method": "pgbench",
                                              "clients": {1: _stat(30_000.0), 4: _stat(40_000.0)}}
    row = {r["key"]: r for r in targets.drain_ratios(results)}["2x10"]
    assert row["limit"] == 40_000.0 and "paired" in row["limit_label"]
    assert row["ratio"] == pytest.approx(20_000 / 40_000)


def test_a_drain_is_also_compared_with_raw_at_as_many_connections_as_processes():
    results = fake_results()
    results["drain"]["2x10"]["raw_paired"] = {"method": "pgbench",
                                              "clients": {"1": _stat(9_000.0), "2": _stat(16_000.0),
                                                          "4": _stat(40_000.0)}}
    row = {r["key"]: r for r in targets.drain_ratios(results)}["2x10"]
    assert row["same_connections_limit"] == 16_000.0
    assert row["same_connections_ratio"] == pytest.approx(20_000 / 16_000)
    assert "| 16,000 | 125% |" in report.render_markdown(results)


def test_the_raw_claim_has_its_batch_size_written_in():
    claim = raw_sql.inline_batch(raw_sql.CLAIM, 10)
    assert "LIMIT 10" in claim and "%(batch)s" not in claim
    script = raw_sql.pgbench_script(raw_sql.inline_batch(raw_sql.PGBENCH_CLAIM_AND_COMPLETE, 7))
    assert "LIMIT 7" in script and ":batch" not in script


def test_the_idle_section_reports_commits_and_cpu_per_worker():
    text = report.render_markdown(json.loads(json.dumps(fake_results())))
    assert "| 20 | 60.0 | 3.00 | 0.30 % (0.20–0.50 %) |" in text
    assert "| 1 | 3.0 | 3.00 | 0.30 % (0.30–0.30 %) |" in text


def test_a_run_of_some_sections_renders_only_those():
    results = fake_results()
    partial = {"meta": {**results["meta"], "sections": ["latency", "idle"]},
               "latency": results["latency"], "idle": results["idle"]}
    text = report.render_markdown(partial)
    assert "## 4. Idle wake-up latency" in text and "## 7. Idle cost" in text
    assert "## 3. Drain" not in text and "## 6. Sustained drain" not in text
    assert "Sections measured: latency, idle" in text
    rows = {row["target"]: row for row in targets.evaluate(partial)}
    assert rows["Idle wake-up latency p50 <= 3 ms"]["met"] is True
    assert rows["enqueue_many(1,000) >= 60,000 jobs/s"]["measured"] == "not measured"


def test_sections_are_chosen_by_name_and_need_their_own_report_path(capsys):
    args = parse_args(["--sections", "latency,idle", "--size", "small", "--out", "/tmp/x.md"])
    assert args.sections == ("latency", "idle")  # in the benchmark's own order
    assert parse_args([]).sections == DEFAULT_SECTIONS and "idle" in SECTIONS  # all but the peers
    with pytest.raises(SystemExit):
        parse_args(["--sections", "idle,latncy", "--out", "/tmp/x.md"])
    assert "unknown section(s) latncy" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--sections", "idle"])
    assert "--sections needs --out" in capsys.readouterr().err


def test_proc_stat_cpu_fields_are_read_after_the_command_name():
    line = "4242 (sqla (queue) w) S 1 4242 4242 0 -1 4194560 900 0 0 0 17 5 0 0 20 0 9 0 100 0 0"
    assert idle.parse_proc_stat(line) == 22  # utime 17 + stime 5 ticks
    assert idle.cpu_seconds(os.getpid()) >= 0


def test_the_asyncio_targets_compare_each_async_figure_with_its_sync_twin():
    rows = {row["target"]: row for row in targets.asyncio_rows(fake_results())}
    enqueue = rows["enqueue_many_async(1,000) >= 80 % of enqueue_many(1,000) jobs/s, same run, same kind of engine"]
    assert enqueue["met"] is True and enqueue["ratio"] == pytest.approx(0.85)  # the worse kind of engine
    assert enqueue["measured"] == "85% (worst)"
    assert enqueue["note"] == ("Queue(URL): async 63,000, sync 70,000 jobs/s; "
                               "Queue(Engine) / Queue(AsyncEngine): async 51,000, sync 60,000 jobs/s")
    drain = rows["Async no-op drain, 1 process x concurrency 10 >= 80 % of the sync drain, same run"]
    assert drain["met"] is False and drain["measured"] == "75%"
    sleep = rows["1,000 jobs x `await asyncio.sleep(0.1)`, 1 process x concurrency 100, drained in <= 2 s"]
    assert sleep["met"] is True and sleep["measured"] == "1.20 s" and sleep["ratio"] == pytest.approx(0.6)


def test_an_incomplete_sleep_drain_does_not_meet_its_target():
    results = fake_results()
    results["asyncio"]["sleep"].update(completed=600, incomplete=True)
    sleep = targets.asyncio_rows(results)[-1]
    assert sleep["met"] is False and sleep["note"] == "only 600 of 1,000 completed"


def test_the_asyncio_section_renders_sync_beside_async():
    for data in (fake_results(), json.loads(json.dumps(fake_results()))):
        text = report.render_markdown(data)
        assert ("| enqueue_many(1,000) vs enqueue_many_async(1,000), Queue(URL), jobs/s | 70,000 | 63,000 | "
                "90% (88%–92%) | – |") in text
        assert ("| enqueue_many(1,000) vs enqueue_many_async(1,000), Queue(Engine) / Queue(AsyncEngine), jobs/s | "
                "60,000 | 51,000 | 85% | – |") in text
        assert "| No-op drain, 1 process x concurrency 10 (20,000 jobs), jobs/s | 8,000 | 6,000 | 75% | 100 / 100 |" \
            in text
        assert "concurrency 100: 1.20 s from the start signal" in text and "would take 100 s" in text


def test_without_the_asyncio_section_its_targets_are_not_measured():
    results = fake_results()
    del results["asyncio"]
    rows = targets.asyncio_rows(results)
    assert [row["met"] for row in rows] == [None, None, None]
    assert "## 8. asyncio" not in report.render_markdown(results)
    assert parse_args(["--sections", "asyncio", "--out", "/tmp/x.md"]).sections == ("asyncio",)


PRIORITIES_TARGET = ("Claim cost at the large backlog with priorities -1/0/5 in use within 1.2x of the same backlog "
                     "at one priority, same run")


def test_claim_cost_with_priorities_is_judged_against_one_priority_in_the_same_run():
    rows = {row["target"]: row for row in targets.evaluate(fake_results())}
    row = rows[PRIORITIES_TARGET]
    assert row["met"] is True and row["ratio"] == pytest.approx(1.1)  # the median per-repetition ratio
    assert row["measured"] == "1.10x" and row["note"] == "1,000,000 pending: 660 µs with priorities, 600 µs without"
    slow = fake_results()
    slow["claim_cost"]["priorities"]["ratio"] = _stat(1.3)
    assert targets.priorities_row(slow)["met"] is False
    old = fake_results()
    del old["claim_cost"]["priorities"]  # results written before priorities existed
    assert targets.priorities_row(old)["met"] is None


def test_the_claim_cost_section_shows_priorities_beside_one_priority():
    for data in (fake_results(), json.loads(json.dumps(fake_results()))):
        text = report.render_markdown(data)
        assert "| 1,000,000, one priority (0) | 600 | 250 | 8 |" in text
        assert "| 1,000,000, priorities -1, 0, 5 | 660 | 260 | 9 |" in text
        assert "| with / without priorities | 1.10x (1.05–1.15) | 1.04x | |" in text
    old = fake_results()
    del old["claim_cost"]["priorities"]
    assert "priorities" not in "\n".join(report._claim_cost_section(old))


def _claim_cost_only(results: dict) -> dict:
    meta = {**results["meta"], "command": "python -m benchmarks --sections claim_cost --update",
            "sections": ["claim_cost"], "code_version": "commit abc1234", "started": "2026-02-02 10:00 UTC"}
    return {"meta": meta, "claim_cost": results["claim_cost"]}


def test_update_replaces_only_the_sections_measured_and_their_target_rows():
    before = fake_results()
    del before["claim_cost"]["priorities"]  # a report from before priorities
    before["claim_cost"]["large"]["ours_us"] = _stat(900.0)
    old = report.render_markdown(before, "performance.png")
    later = _claim_cost_only(fake_results())

    new = report.update_markdown(old, later)

    old_lines, new_lines = old.splitlines(), new.splitlines()
    assert report._claim_cost_section(later)[0] in new_lines
    assert "| 1,000,000 | 600 | 250 | 8 |" in new and "| 1,000,000 | 900 | 250 | 8 |" not in new
    assert "| with / without priorities | 1.10x (1.05–1.15) | 1.04x | |" in new
    for heading in ("## 3. Drain", "## 6. Sustained drain"):  # the others exactly as they were
        assert _block(new_lines, heading) == _block(old_lines, heading)
    assert "![performance plot](performance.png)" in new and "This run: `python -m benchmarks --size tiny`" in new
    [note] = [line for line in new_lines if line.startswith(report.REMEASURED)]
    assert "claim_cost, by `python -m benchmarks --sections claim_cost --update` on commit abc1234" in note
    table = _block(new_lines, "## Targets")
    texts = [line.split(" | ")[0] for line in table if line.startswith("| ") and "---" not in line][1:]
    at = texts.index("| Claim cost at 1,000,000 pending within 1.3x of 10,000")
    assert texts[at + 1] == f"| {PRIORITIES_TARGET}"  # the new target right after its neighbour
    assert len(texts) == len(targets.evaluate(fake_results()))  # the 'not measured' row was replaced
    assert _block(new_lines, "## Targets")[3:at + 3] == _block(old_lines, "## Targets")[3:at + 3]
    assert report.update_markdown(new, later).count(report.REMEASURED) == 1  # the same sections again


def test_update_refuses_a_run_of_another_size():
    old = report.render_markdown(fake_results())
    later = _claim_cost_only(fake_results())
    later["meta"]["size"] = "full"
    with pytest.raises(ValueError, match="measured at size 'tiny', this run at 'full'"):
        report.update_markdown(old, later)
    assert parse_args(["--sections", "claim_cost", "--update"]).out == "docs/performance.md"


def _block(lines: list[str], heading: str) -> list[str]:
    start = lines.index(heading)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]
