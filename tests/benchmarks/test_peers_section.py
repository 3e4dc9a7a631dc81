"""The peers section's pieces without a run: version pinning and reinstalling, the completion
figures, the peers' own outputs as the section parses them, graphile-worker's completion log
written by the benchmark's graphile.config.js (run by node when it is installed), the command
line, the targets and the report. Nothing here installs a peer or times anything; CI runs the
section itself at ``--size tiny --peers`` (.ci/run). The figures below are made up.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root holds benchmarks/

from benchmarks import peer_install, peers, report, stats, targets  # noqa: E402
from benchmarks.__main__ import DEFAULT_SECTIONS, SECTIONS, parse_args  # noqa: E402
from test_benchmark_smoke import fake_results  # noqa: E402


# -- installing ---------------------------------------------------------------------------------

def test_peers_are_pinned_to_exact_versions():
    assert peer_install.PGQUEUER_REQUIREMENTS[0] == f"pgqueuer[asyncpg]=={peer_install.PGQUEUER_VERSION}"
    assert all("==" in req for req in peer_install.PGQUEUER_REQUIREMENTS)
    package = peer_install.graphile_package_json()
    assert package["dependencies"] == {"graphile-worker": peer_install.GRAPHILE_WORKER_VERSION}
    assert peer_install.GRAPHILE_WORKER_VERSION[0].isdigit()  # exact: no ^ or ~ range


def test_an_environment_is_reused_only_with_the_same_pins(tmp_path):
    record = peer_install.pin_record("pgqueuer", {"requirements": ["pgqueuer==1.6.0"]})
    assert not peer_install.is_installed(tmp_path, record)  # nothing there yet
    (tmp_path / peer_install.MARKER).write_text(json.dumps(record))
    assert peer_install.is_installed(tmp_path, record)
    moved = peer_install.pin_record("pgqueuer", {"requirements": ["pgqueuer==1.7.0"]})
    assert not peer_install.is_installed(tmp_path, moved)  # a changed pin installs again
    (tmp_path / peer_install.MARKER).write_text("{half written")
    assert not peer_install.is_installed(tmp_path, record)


def test_the_cache_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SQLA_QUEUE_BENCH_CACHE", str(tmp_path))
    assert peer_install.cache_dir() == tmp_path
    monkeypatch.delenv("SQLA_QUEUE_BENCH_CACHE")
    assert peer_install.cache_dir().parts[-3:] == (".cache", "sqla_queue_bench", "peers")


def test_node_versions_are_read():
    assert peer_install.node_major("v20.20.2\n") == 20
    with pytest.raises(ValueError, match="Node.js version"):
        peer_install.node_major("command not found")


# -- the figures ----------------------------------------------------------------------------------

def test_steady_rate_leaves_out_start_up_and_the_tail():
    # 1 s of start-up, then 100 jobs at 100 jobs/s, then one straggler
    times = [1.0 + n / 100 for n in range(100)] + [5.0]
    assert peers.steady_rate(times) == pytest.approx(100, rel=0.02)
    assert peers.steady_rate([1.0] * 5) is None  # too few to say
    assert peers.steady_rate([2.0] * 50) is None  # all at one instant


def test_completion_figures_run_from_process_start():
    times = [0.5 + n / 1000 for n in range(1000)]  # first after 0.5 s, last at 1.499 s
    out = peers.completion_figures(times, 1000)
    assert out["jobs"] == 1000 and out["incomplete"] is False
    assert out["startup_s"] == 0.5 and out["seconds"] == pytest.approx(1.499)
    assert out["jobs_per_s"] == pytest.approx(1000 / 1.499)
    later = peers.completion_figures(times, 1001, last=2.0)  # graphile-worker's pool:release
    assert later["seconds"] == 2.0 and later["incomplete"] is True
    with pytest.raises(ValueError, match="no completions"):
        peers.completion_figures([], 10)


def test_graphile_completion_logs_are_read_relative_to_the_start():
    one = json.dumps({"completed": [1_000_500, 1_000_750], "released": [1_000_800]})
    two = json.dumps({"completed": [1_000_600], "released": [1_000_900]})
    times, released = peers.parse_graphile_events([one, two], spawned_at=1_000.0)
    assert times == pytest.approx([0.5, 0.75, 0.6]) and released == pytest.approx(0.9)
    assert peers.parse_graphile_events([json.dumps({"completed": [1_000_500], "released": []})], 1_000.0)[1] is None


def test_enqueue_output_is_the_last_json_line():
    out = peers.parse_enqueue_output('npm notice\n{"jobs": 1, "batch": 1, "seconds": 0.02}\n')
    assert out["seconds"] == 0.02
    with pytest.raises(ValueError, match="no result"):
        peers.parse_enqueue_output("Traceback ...")
    with pytest.raises(ValueError, match="no time"):
        peers.parse_enqueue_output('{"jobs": 1, "seconds": 0}')


def test_wakeup_latency_pairs_each_enqueue_with_its_handler_start():
    starts = peers.parse_starts("1 100.0105\n2 200.002\n1 150.0\n\n")  # a second run of job 1 is not its start
    assert starts == {1: 100.0105, 2: 200.002}
    out = peers.wakeup_latencies({1: (100.0, 100.0025), 2: (200.0, 200.001)}, starts)
    assert out["after_commit_ms"] == pytest.approx([8.0, 1.0])
    assert out["from_call_ms"] == pytest.approx([10.5, 2.0])
    with pytest.raises(ValueError, match=r"job\(s\) \[3\]"):
        peers.wakeup_latencies({3: (1.0, 2.0)}, starts)


def test_configurations_are_described_as_run():
    assert peers.describe_sqla_queue(2, 10) == ("2 x `sqla-queue --app APP worker --queues bench --concurrency 10 "
                                                "--until-empty`")
    assert "--batch-size 100" in peers.describe_pgqueuer(peers.PGQUEUER_DRAINS["best"])
    best = peers.describe_graphile(peers.GRAPHILE_DRAINS["best"])
    assert "localQueue.size 500" in best and "--jobs 24" in best
    assert peers.describe_graphile(peers.GRAPHILE_DRAINS["1x10"]) == "1 x `graphile-worker --once --jobs 10`"
    # Each worker command with no tuning flags, as a user first runs it.
    assert peers.describe_pgqueuer(peers.PGQUEUER_DRAINS[peers.DEFAULTS]) == (
        "1 x `pgq run pgqueuer_app:create_pgqueuer --mode drain`")
    assert peers.describe_sqla_queue_defaults().startswith("1 x `sqla-queue --app APP worker --until-empty`")


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_graphile_config_writes_the_completion_log(tmp_path):
    """The config file graphile-worker's CLI loads: its events write the completion log at exit."""
    config = peer_install.SCRIPTS / "graphile" / "graphile.config.js"
    out = tmp_path / "events.json"
    script = (f"const c = require({json.dumps(str(config))});"
              "c.worker.events.emit('job:complete', {error: null});"
              "c.worker.events.emit('job:complete', {error: new Error('x')});"
              "c.worker.events.emit('pool:release', {});"
              "console.log(JSON.stringify({lq: c.worker.localQueue, d: c.worker.completeJobBatchDelay}));")
    done = subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True,
                          env={"PATH": "/usr/bin:/bin:/usr/local/bin", "BENCH_EVENTS_OUT": str(out),
                               "BENCH_LOCAL_QUEUE_SIZE": "500", "BENCH_COMPLETE_BATCH_DELAY": "0"})
    assert json.loads(done.stdout) == {"lq": {"size": 500}, "d": 0}
    log = json.loads(out.read_text())
    assert len(log["completed"]) == 1 and len(log["released"]) == 1  # a failed job is no completion
    times, released = peers.parse_graphile_events([out.read_text()], log["completed"][0] / 1000)
    assert times == [0.0] and released >= 0


# -- the command line -----------------------------------------------------------------------------

def test_peers_run_only_when_asked():
    assert "peers" in SECTIONS and "peers" not in DEFAULT_SECTIONS
    assert parse_args([]).sections == DEFAULT_SECTIONS
    assert parse_args(["--peers"]).sections == (*DEFAULT_SECTIONS, "peers")
    assert parse_args(["--peers"]).out == "docs/performance.md"  # every section plus the peers: a full run
    assert parse_args(["--sections", "drain", "--peers", "--out", "x.md"]).sections == ("drain", "peers")
    with pytest.raises(SystemExit):
        parse_args(["--sections", "peers"])  # a partial run needs --out


# -- targets and the report -------------------------------------------------------------------------

def _stat(*values):
    return stats.summary(values)


def fake_peers() -> dict:
    """The peers section's shape (numbers invented): the CLI 1 x 10 at 2.5x pgqueuer, 2 x 10 at
    1.5x; sqla_queue's best (1 x 50) ahead of graphile-worker's best from process start, behind it
    steady; bulk enqueue at 0.8x addJobs."""
    def drain(rate, steady, startup=0.5, cpu=(40.0, 30.0)):
        return {"jobs_per_s": _stat(rate), "steady_per_s": _stat(steady), "startup_s": _stat(startup),
                "seconds": _stat(20_000 / rate), "exit_s": _stat(20_000 / rate + 0.2), "jobs": 20_000,
                "incomplete": False, "client_cpu_us_per_job": _stat(cpu[0]), "server_cpu_us_per_job": _stat(cpu[1])}

    def enqueue(rate):
        return {"bulk": {"jobs_per_s": _stat(rate), "process_seconds": _stat(1.0)},
                "single": {"call_ms": _stat(20.0), "process_ms": _stat(300.0)}}

    return {
        "jobs": 20_000, "bulk_batch": 1_000, "import_floor_s": _stat(0.25),
        "versions": {"pgqueuer": {"pgqueuer": "1.6.0", "asyncpg": "0.32.0"},
                     "graphile-worker": {"graphile-worker": "0.17.3", "node": "20.20.2"}},
        "configs": {"sqla_queue": {"1x10": "a", "2x10": "b", "1x50": "c"},
                    "pgqueuer": {"1x10": "d", "2x10": "e", "best": "f"},
                    "graphile-worker": {"1x10": "g", "2x10": "h", "best": "i"}},
        "drain": {"sqla_queue": {"1x10": drain(5_000, 6_000), "2x10": drain(6_000, 7_000),
                                 "1x50": drain(9_000, 10_000), "defaults": drain(7_000, 8_000)},
                  "pgqueuer": {"1x10": drain(2_000, 2_500), "2x10": drain(4_000, 4_500), "best": drain(7_000, 8_000),
                               "defaults": drain(4_000, 4_200)},
                  "graphile-worker": {"1x10": drain(2_000, 2_100), "2x10": drain(2_500, 2_600),
                                      "best": drain(8_000, 14_000)}},
        "enqueue": {"sqla_queue": enqueue(40_000), "pgqueuer": enqueue(30_000), "graphile-worker": enqueue(50_000)},
        "latency": {"jobs": 100, "rest_s": [1.0, 1.2], "sqla_queue_poll_interval_s": 0.5,
                    **{s: {"p50_ms": _stat(2.0), "p99_ms": _stat(9.5), "call_p50_ms": _stat(3.0), "samples_ms": [2.0]}
                       for s in ("sqla_queue", "pgqueuer", "graphile-worker")}},
    }


def test_the_issues_side_by_side_targets():
    rows = targets.peer_rows({"peers": fake_peers()})
    assert [row["met"] for row in rows] == [True, False, False, True, False, False, False, True, True]
    assert rows[0]["measured"] == "2.50x" and rows[0]["ratio"] == pytest.approx(1.25)  # 2.5x of the 2x asked
    assert rows[2]["target"].startswith("`sqla-queue worker` with no tuning flags")
    assert rows[2]["measured"] == "1.75x" and rows[2]["ratio"] == pytest.approx(0.875)  # 7,000 vs 4,000
    assert "sqla_queue 1 x 50" in rows[3]["note"]  # the best CLI row, named
    assert rows[5]["ratio"] == pytest.approx(0.8)
    assert rows[6]["measured"] == "500 ms" and rows[6]["ratio"] == pytest.approx(0.5 / 0.3)  # start-up
    assert rows[6]["note"] == ("import floor (`python -c 'import sqlalchemy, psycopg, sqlalchemy.dialects.postgresql."
                               "psycopg'`) 250 ms; pgqueuer 500 ms")
    assert rows[7]["target"].endswith("<= pgqueuer's, same run") and rows[7]["note"] == "500 vs pgqueuer 500 ms"
    assert rows[8]["target"].startswith("Single enqueue") and rows[8]["measured"] == "1.00x"
    assert all(row["met"] is None for row in targets.peer_rows({}))  # not run: not measured


def test_the_graphile_targets_say_what_cpu_per_job_they_leave_and_what_the_drains_spent():
    peers = fake_peers()
    rows = targets.peer_rows({"peers": peers, "meta": {"facts": {"cores": 2}}})
    steady = rows[4]
    # sqla_queue's best steady 10,000 against 1.3 x 14,000: 0.71x asked 1.3x
    assert steady["target"].startswith("Best sqla_queue CLI drain >= 1.3x graphile-worker's")
    assert steady["measured"] == "0.71x" and steady["ratio"] == pytest.approx(10_000 / 14_000 / 1.3)
    budget = 2 * 1e6 / (1.3 * 14_000)  # 110 µs per job on two cores
    assert f"give the workers and PostgreSQL together {budget:,.0f} µs of CPU per job" in steady["why"]
    assert "spent 40 µs per job in its worker processes (their start-up included) and 30 µs in PostgreSQL" in steady["why"]
    assert "(graphile-worker's: 40 and 30 µs)" in steady["why"] and f"{30 / budget:.0%} of that" in steady["why"]
    # from process start the budget is what graphile-worker's time leaves after the import floor
    start = targets.peer_rows({"peers": {**peers, "import_floor_s": _stat(2.0)},
                               "meta": {"facts": {"cores": 2}}})[3]
    needed = 20_000 / (20_000 / 8_000 - 2.0)
    assert f"would have to run at {needed:,.0f} jobs/s once its imports are done (2.00 s)" in start["why"]
    # no CPU figures (an earlier run's results): the reason in words
    assert targets.peer_rows({"peers": peers})[4]["why"] == targets.WHY_VS_GRAPHILE_DRAIN


def test_cpu_per_job_of_a_cli_run():
    from benchmarks.cli_runs import cpu_per_job

    assert cpu_per_job({"client_cpu_s": 0.5, "server_cpu_s": 0.25}, 10_000) == {
        "client_cpu_us_per_job": 50.0, "server_cpu_us_per_job": 25.0}
    assert cpu_per_job({"client_cpu_s": 0.5, "server_cpu_s": None}, 10_000)["server_cpu_us_per_job"] is None


def test_a_start_up_slower_than_pgqueuers_says_whether_the_import_floor_alone_is():
    peers = fake_peers()
    peers["drain"]["pgqueuer"]["1x10"]["startup_s"] = _stat(0.2)  # ours 500 ms, the floor 250 ms
    row = targets.startup_vs_pgqueuer_row(peers)
    assert row["met"] is False and row["measured"] == "2.50x"
    assert "took 250 ms in this run, longer than pgqueuer's whole start-up (200 ms" in row["why"]
    assert "own part on top of the floor was 250 ms" in row["why"]
    peers["import_floor_s"] = _stat(0.1)
    assert "longer than" not in targets.startup_vs_pgqueuer_row(peers)["why"]


def test_the_report_has_the_peers_side_by_side():
    results = {**fake_results(), "peers": fake_peers()}
    results["meta"]["sections"] = [*DEFAULT_SECTIONS, "peers"]
    for data in (results, json.loads(json.dumps(results))):
        text = report.render_markdown(data)
        assert "## 9. Peers" in text and "Sections measured" not in text
        assert "| 20,000 no-op jobs, jobs/s | sqla_queue (CLI) | pgqueuer 1.6.0 | graphile-worker 0.17.3 |" in text
        assert "| drain 1 process x 10, from process start | 5,000 | 2,000 | 2,000 |" in text
        assert "| best config, from process start | 9,000 | 7,000 | 8,000 |" in text
        assert "| drain with the worker command's defaults (no tuning flags), from process start | 7,000 | 4,000 | – |" in text
        assert "pgqueuer 1.6.0 (asyncpg 0.32.0)" in text
        assert "| 1 x 10 | 5,000 | 6,000 | 0.50 s | 4.20 s |" in text  # the CLI row beside section 3's
        assert "CLI drain, 1 process x 10, from process start >= 2x pgqueuer's" in text
        assert "| idle wake-up, enqueue call's return → handler start, p50 / p99 | 2.00 ms / 9.50 ms |" in text
        assert "| best config, CPU per job: the worker processes / PostgreSQL | 40 µs / 30 µs |" in text
    without = report.render_markdown(fake_results())
    assert "## 9. Peers" not in without and "not measured" in without


def test_each_missed_target_says_why_from_the_same_runs_figures():
    results = {**fake_results(), "peers": fake_peers()}
    results["meta"]["sections"] = [*DEFAULT_SECTIONS, "peers"]
    text = report.render_markdown(results)
    table, _, rest = text.partition(report.WHY_HEADING)
    missed = [line.split(" | ")[0].removeprefix("| ") for line in table.split("## Targets")[1].splitlines()
              if line.endswith("| **not met** |")]
    why = [line.removeprefix("- **").split("**: ")[0] for line in rest.split("\n## ")[0].splitlines()
           if line.startswith("- **")]
    assert missed and why == missed  # every missed target, in the table's order, and nothing else
    # the start-up's reason carries this run's import floor (250 ms) and what sqla_queue added on top
    assert "Importing SQLAlchemy, psycopg and its dialect alone took 250 ms in this run" in rest
    assert "own start-up on top of that was 250 ms" in rest
    met = {**results, "peers": {**fake_peers(), "import_floor_s": _stat(0.01)}}
    met["peers"]["drain"]["sqla_queue"]["1x10"]["startup_s"] = _stat(0.2)
    assert "CLI worker start-up" not in report.render_markdown(met).partition(report.WHY_HEADING)[2].split("\n## ")[0]


def test_the_why_of_a_slow_bulk_enqueue_and_of_a_start_up_below_the_import_floor():
    results = {**fake_results(), "peers": {**fake_peers(), "import_floor_s": _stat(0.6)}}
    results["meta"]["sections"] = [*DEFAULT_SECTIONS, "peers"]
    results["enqueue"]["many_1000"] = _stat(30_000.0)  # missed: under 60,000
    rest = report.render_markdown(results).partition(report.WHY_HEADING)[2].split("\n## ")[0]
    raw = results["raw"]["enqueue"]
    psycopg, pgbench = raw["psycopg"][1000]["median"], raw["pgbench"][1000]["median"]
    assert (f"- **enqueue_many(1,000) >= 60,000 jobs/s**: The same 1,000-row INSERT sent from Python by psycopg "
            f"alone ran at {psycopg:,.0f} jobs/s in this run; pgbench, a C client, sent it at {pgbench:,.0f}. "
            f"`enqueue_many` reached {30_000 / psycopg:.0%} of the psycopg figure: the rest of the distance is "
            "sqla_queue's own work per job") in rest  # far below psycopg's own: not the Python client's cost
    # the worker's start-up (500 ms) under this run's import floor (600 ms): no negative "on top"
    assert "took 600 ms in this run, more than the target and more than the worker's whole start-up" in rest
    assert "on top of that" not in rest and "-100 ms" not in rest


def test_an_update_of_the_drain_section_alone_says_why_each_missed_floor_is_missed():
    results = {**fake_results(), "peers": fake_peers()}
    results["meta"]["sections"] = [*DEFAULT_SECTIONS, "peers"]
    old = report.render_markdown(results)
    drained = {"meta": {**results["meta"], "sections": ["drain"]}, "drain": json.loads(json.dumps(results["drain"]))}
    for key, rate in (("1x10", 4_000.0), ("2x10", 7_000.0)):  # under the 6,000 and 10,000 floors
        drained["drain"][key]["jobs_per_s"] = _stat(rate)
        drained["drain"][key]["raw_paired"] = {"method": "pgbench", "clients": {"1": _stat(9_000.0),
                                                                                "4": _stat(20_000.0)}}

    why = report.update_markdown(old, drained).partition(report.WHY_HEADING)[2].split("\n## ")[0]

    assert ("- **Drain, 1 process x concurrency 10 >= 6,000 jobs/s**: A floor in jobs/s holds only on a machine "
            "like the one it was set on. Here the raw-SQL limit at batch 10 was 20,000 jobs/s (pgbench, 4 clients, "
            "paired), so 6,000 would be 30% of it; the drain reached 4,000, 20% of it") in why
    assert "- **Drain, 2 processes x concurrency 10 >= 10,000 jobs/s**: " in why  # the raw section was not run


def test_an_update_rederives_the_why_list_for_the_targets_it_measured():
    results = {**fake_results(), "peers": fake_peers()}
    results["meta"]["sections"] = [*DEFAULT_SECTIONS, "peers"]
    old = report.render_markdown(results)
    faster = json.loads(json.dumps(results))
    faster["meta"]["sections"] = ["peers"]
    for key in [k for k in faster if k not in ("meta", "peers")]:
        del faster[key]
    faster["peers"]["drain"]["sqla_queue"]["1x10"]["startup_s"] = _stat(0.2)
    faster["peers"]["import_floor_s"] = _stat(0.01)

    new = report.update_markdown(old, faster)

    old_why = old.partition(report.WHY_HEADING)[2].split("\n## ")[0]
    new_why = new.partition(report.WHY_HEADING)[2].split("\n## ")[0]
    assert "CLI worker start-up" in old_why and "CLI worker start-up" not in new_why  # met now
    kept = [line for line in old_why.splitlines() if line.startswith("- **Drain")]
    assert kept and all(line in new_why for line in kept)  # targets this run did not measure keep theirs
    assert new.count(report.WHY_HEADING) == 1
    assert report.update_markdown(new, faster) == new


def test_the_cli_runs_use_compiled_bytecode_as_an_installed_package_does(tmp_path):
    # pip compiles a wheel's modules at install; the peers' packages have their bytecode, so the
    # benchmark's sqla_queue must too, or its start-up counts compiling sources each time.
    import sqla_queue
    from benchmarks.cli_runs import CliRuns

    module = Path(sqla_queue.__file__).parent / "states.py"
    compiled = Path(importlib.util.cache_from_source(str(module)))
    compiled.unlink(missing_ok=True)

    CliRuns(db=None, work=tmp_path, log=print)

    assert compiled.exists() and compiled.stat().st_mtime >= module.stat().st_mtime


def test_a_slower_single_enqueue_says_what_its_call_does_beside_both_systems_spreads():
    peers = fake_peers()
    peers["enqueue"]["sqla_queue"]["single"]["call_ms"] = _stat(21.0, 22.5, 20.5)
    peers["enqueue"]["pgqueuer"]["single"]["call_ms"] = _stat(19.0, 19.5, 18.0)
    [row] = [r for r in targets.peer_rows({"peers": peers}) if r["target"].startswith("Single enqueue")]
    assert row["met"] is False and row["measured"] == "1.11x"
    assert row["why"].startswith("The call took 21.0 ms (20.5–22.5) in sqla_queue and 19.0 ms (18.0–19.5) in "
                                 "pgqueuer over the repetitions.")


def test_a_drain_short_of_twice_pgqueuers_sets_its_steady_lead_beside_the_start_ups():
    peers = fake_peers()
    [row] = [r for r in targets.peer_rows({"peers": peers}) if r["target"].startswith("CLI drain, 2 processes")]
    ours, theirs = peers["drain"]["sqla_queue"]["2x10"], peers["drain"]["pgqueuer"]["2x10"]
    assert row["met"] is False
    assert row["why"].startswith(
        f"Once started, sqla_queue's 2 x 10 drained at {ours['steady_per_s']['median']:,.0f} jobs/s, "
        f"{ours['steady_per_s']['median'] / theirs['steady_per_s']['median']:.1f}x pgqueuer's")
    assert f"start-up took {ours['startup_s']['median']:.2f} s" in row["why"]


def _with_raw(peers: dict, *, one=(9_000.0, 11_000.0), two=(30_000.0, 40_000.0), startup=0.3, spread=0.0) -> dict:
    """`fake_peers` with the raw limit's rows, 1 and 2 processes: (from process start, steady);
    `spread`: how far (a fraction) its best and worst repetitions lie from the median."""
    def stat(value):
        low, high = value * (1 - spread), value * (1 + spread)
        return _stat(low, value, high)

    def drain(rate, steady):
        return {"jobs_per_s": stat(rate), "steady_per_s": stat(steady), "startup_s": stat(startup),
                "jobs": 20_000, "incomplete": False,
                "client_cpu_us_per_job": _stat(20.0), "server_cpu_us_per_job": _stat(20.0)}

    peers["drain"]["raw"] = {"1x500": drain(*one), "2x500": drain(*two)}
    peers["configs"]["raw"] = {key: peers_module.describe_raw(config) for key, config in peers_module.RAW_DRAINS.items()}
    return peers


peers_module = peers


def test_the_raw_limit_says_whether_a_missed_target_is_within_a_python_workers_reach():
    reachable = _with_raw(fake_peers())
    rows = targets.peer_rows({"peers": reachable, "meta": {"facts": {"cores": 2}}})
    steady = rows[4]  # 1.3 x graphile-worker's 14,000 = 18,200 asked; two raw processes drained 40,000
    assert steady["met"] is False
    assert ("statements 500 jobs at a time, no handler; 2 processes) drained 40,000 jobs/s steady in this run, "
            "2.20x the 18,200 the target asks: within a Python worker's reach; sqla_queue's reached 25% of it."
            ) in steady["why"]
    two = rows[1]  # 2 x 10: 2 x pgqueuer's 4,000 asked of sqla_queue's 6,000; bounded by the 2-process raw row
    assert "2 processes) drained 30,000 jobs/s from process start" in two["why"]
    assert "within a Python worker's reach; sqla_queue's reached 20% of it." in two["why"]
    # a raw limit below what the target asks: no Python worker can meet it here
    beyond = _with_raw(fake_peers(), two=(30_000.0, 10_000.0))
    steady = targets.peer_rows({"peers": beyond, "meta": {"facts": {"cores": 2}}})[4]
    assert steady["why"].endswith("drained 10,000 jobs/s steady in this run (its best repetition 10,000), short of "
                                  "the 18,200 the target asks: no Python worker on this table can meet it here.")
    # a median short of the target with a best repetition past it proves nothing either way
    edge = _with_raw(fake_peers(), two=(30_000.0, 17_000.0), spread=0.2)
    steady = targets.peer_rows({"peers": edge, "meta": {"facts": {"cores": 2}}})[4]
    assert steady["why"].endswith("drained 17,000 jobs/s steady in this run, short of the 18,200 the target asks, "
                                  "though its best repetition reached 20,400: at the edge of a Python worker's reach "
                                  "here.")
    # no raw rows (an earlier run's results): the reasons as before
    assert "raw limit" not in (targets.peer_rows({"peers": fake_peers(), "meta": {"facts": {"cores": 2}}})[4]["why"])


def test_a_start_up_slower_than_pgqueuers_is_set_beside_the_raw_limits_first_completion():
    peers = _with_raw(fake_peers(), startup=0.3)
    peers["drain"]["pgqueuer"]["1x10"]["startup_s"] = _stat(0.4)  # ours 500 ms
    row = targets.startup_vs_pgqueuer_row(peers)
    assert row["met"] is False
    assert "first completed a job 300 ms after its start, 100 ms sooner than pgqueuer's 400 ms" in row["why"]
    assert "sqla_queue's own part on top of that was 200 ms" in row["why"]
    # the same against the 300 ms target: a raw start-up of 300 ms is within it, one of 450 ms is not
    assert "0 ms sooner than the target 300 ms: within" in targets.startup_row(peers)["why"]
    peers["drain"]["raw"]["1x500"]["startup_s"] = _stat(0.45)
    assert ("later than pgqueuer's 400 ms even at its best (450 ms): no Python worker on this table can start that "
            "soon here" in targets.startup_vs_pgqueuer_row(peers)["why"])
    assert "later than the target 300 ms even at its best (450 ms): no Python worker" in targets.startup_row(peers)["why"]
    peers["drain"]["raw"]["1x500"]["startup_s"] = _stat(0.25, 0.31, 0.36)  # this median over, its best under
    assert ("later than the target 300 ms, though its best repetition took 250 ms: at the edge of a Python worker's "
            "reach here" in targets.startup_row(peers)["why"])


def test_the_import_floor_is_timed_to_the_end_of_the_imports():
    """Not to the interpreter's exit, which no worker's start-up waits for."""
    import time

    t0 = time.time()
    floor = peers.import_floor()
    assert 0 < floor < time.time() - t0


def test_the_report_shows_the_raw_limit_as_a_column_of_its_own():
    results = {**fake_results(), "peers": _with_raw(fake_peers())}
    results["meta"]["sections"] = [*DEFAULT_SECTIONS, "peers"]
    text = report.render_markdown(results)
    assert ("| 20,000 no-op jobs, jobs/s | sqla_queue (CLI) | pgqueuer 1.6.0 | graphile-worker 0.17.3 | "
            "raw limit (Python, no handler) |") in text
    assert "| drain 1 process x 10, from process start | 5,000 | 2,000 | 2,000 | 9,000 |" in text
    assert "| best config, from process start | 9,000 | 7,000 | 8,000 | 30,000 |" in text
    assert "| bulk enqueue, 20,000 in calls of 1,000, fresh process | 40,000 | 30,000 | 50,000 | – |" in text
    assert "- raw limit (Python, no handler) 2x500: 2 x `python raw_python_drain.py 500`" in text
    assert "The last column is no queue" in text


def test_the_raw_limit_script_drains_the_table_from_a_fresh_process(own_database):
    """The script as the peers section starts it: every job it claims ends completed."""
    import os

    import psycopg

    from benchmarks import raw_sql

    url, engine = own_database
    dsn = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(raw_sql.FILL_PENDING, {"queue": raw_sql.QUEUE, "task": raw_sql.TASK, "n": 25})
    done = subprocess.run([sys.executable, str(peer_install.SCRIPTS / "raw_python_drain.py"), "10"],
                          env={**os.environ, "PGDSN": dsn}, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "25"
    with psycopg.connect(dsn) as conn:
        assert conn.execute(raw_sql.COUNT_COMPLETED).fetchone()[0] == 25
