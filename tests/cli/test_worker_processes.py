"""``sqla-queue worker --processes N``: a supervisor and its worker processes, as real processes
on real PostgreSQL. Every wait polls for the event it needs (generous limits, nothing timed)."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from waiting import wait_until

from sqla_queue.cli.worker import YOUNG_GENERATION_THRESHOLD, _settle_collector

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists() or not hasattr(os, "fork"),
                                reason="finds a supervisor's children in /proc (Linux)")

SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))
SUMMARY_START = "claimed "

APP = textwrap.dedent(
    """
    import os
    import signal
    import time
    from pathlib import Path

    from sqlalchemy import create_engine, event

    import sqla_queue as sq

    STARTS = Path(os.environ["STARTS_DIR"])
    engine = create_engine(os.environ["APP_DATABASE_URL"])
    # Every connection made the app's way (the workers' too) says which process made it.
    event.listen(engine, "connect", lambda *_: (STARTS.parent / f"connected-{os.getpid()}").write_text(""))
    queue = sq.Queue(engine, load_entrypoints=False)


    def started(ctx):
        (STARTS / f"{ctx.job_id}-{os.getpid()}").write_text("")


    def wait_for(condition):
        give_up = time.monotonic() + 120
        while not condition() and time.monotonic() < give_up:
            time.sleep(0.02)


    @queue.task
    def meet(payload, ctx):
        \"\"\"Return only once handlers have started in two processes: both must have claimed.\"\"\"
        started(ctx)
        wait_for(lambda: len({p.name.split("-")[1] for p in STARTS.iterdir()}) >= 2)


    @queue.task
    def hold(payload, ctx):
        \"\"\"Run until the test creates the file `release`.\"\"\"
        started(ctx)
        wait_for(lambda: (STARTS.parent / "release").exists())


    @queue.task
    def collector(payload, ctx):
        # how many objects this process's garbage collector was told to leave alone
        import gc
        started(ctx)
        (STARTS.parent / f"frozen-{os.getpid()}").write_text(str(gc.get_freeze_count()))
        (STARTS.parent / f"threshold-{os.getpid()}").write_text(str(gc.get_threshold()[0]))


    @queue.task(max_attempts=1)
    def crash(payload, ctx):
        started(ctx)
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


def children_of(pid: int) -> set[int]:
    """Live (not zombie) processes whose parent is `pid`."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
        if int(ppid) == pid and state != "Z":
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


class Command:
    """``sqla-queue --app procapp:queue worker ...`` in `root`, on the test database."""

    def __init__(self, root: Path, database_url: str) -> None:
        self.root = root
        self.starts = root / "starts"
        self.starts.mkdir()
        (root / "procapp.py").write_text(APP)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
        self.env.update(APP_DATABASE_URL=database_url, STARTS_DIR=str(self.starts))
        self.process: subprocess.Popen | None = None

    def argv(self, *options: str) -> list[str]:
        return [SCRIPT, "--app", "procapp:queue", "worker", "--poll-interval", "0.1", *options]

    def run(self, *options: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(*options), cwd=self.root, env={**self.env, **env},
                              capture_output=True, text=True, timeout=300)

    def start(self, *options: str) -> subprocess.Popen:
        self.out = open(self.root / "stdout", "w")
        self.err = open(self.root / "stderr", "w")
        self.process = subprocess.Popen(self.argv(*options), cwd=self.root, env=self.env,
                                        stdout=self.out, stderr=self.err, text=True)
        return self.process

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        code = self.process.wait(timeout=timeout)
        self.out.close()
        self.err.close()
        return code, (self.root / "stdout").read_text(), self.stderr()

    def stderr(self) -> str:
        return (self.root / "stderr").read_text(errors="replace")

    def running_pids(self) -> set[int]:
        """Processes whose handlers have started, from the files the handlers write."""
        return {int(p.name.split("-")[1]) for p in self.starts.iterdir()}

    def workers(self, count: int) -> set[int]:
        """Wait until the supervisor has `count` live children, and return them."""
        return wait_until(lambda: self._alive() and len(found := children_of(self.process.pid)) == count and found,
                          f"{count} worker processes")

    def _alive(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"the command exited with {self.process.returncode}:\n{self.stderr()[-3000:]}")
        return True

    def release(self) -> None:
        (self.root / "release").write_text("")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            for pid in children_of(self.process.pid):
                os.kill(pid, signal.SIGKILL)
            self.process.kill()
            self.process.wait()


@pytest.fixture
def command(tmp_path, database_url, queue) -> Iterator[Command]:
    for name in ("meet", "hold", "collector"):
        queue.task(name=name)(lambda payload, ctx: None)
    queue.task(name="crash", max_attempts=1)(lambda payload, ctx: None)
    cmd = Command(tmp_path, database_url)
    try:
        yield cmd
    finally:
        cmd.stop()


def rows(engine, where: str = "true") -> list[tuple]:
    with engine.connect() as conn:
        return conn.execute(text(f"SELECT id, status, locked_by FROM sqla_queue_jobs WHERE {where} ORDER BY id")).all()


def statuses(engine) -> set[str]:
    return {row.status for row in rows(engine)}


def test_two_processes_both_claim_and_drain_with_one_summary(command, queue, engine):
    ids = [queue.enqueue("meet", {}) for _ in range(6)]
    result = command.run("--processes", "2", "--concurrency", "1", "--until-empty")
    assert result.returncode == 0, result.stderr
    summary_lines = [line for line in result.stdout.splitlines() if line.startswith(SUMMARY_START)]
    assert summary_lines == ["claimed 6, completed 6, retried 0, failed 0, lost 0, released 0"]
    assert result.stdout.strip() == summary_lines[0]
    assert statuses(engine) == {"completed"}
    workers = {row.locked_by for row in rows(engine)}
    assert len(workers) == 2  # each process its own worker id, and both claimed
    assert {int(w.split(":")[1]) for w in workers} == command.running_pids()
    assert len(ids) == 6
    connected = {int(p.name.split("-")[1]) for p in command.root.glob("connected-*")}
    assert connected == command.running_pids()  # each child its own connections; none in the supervisor


def test_one_process_runs_the_worker_in_the_command_itself(command, queue, engine):
    queue.enqueue("hold", {})
    command.release()
    result = command.run("--processes", "1", "--until-empty")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "claimed 1, completed 1, retried 0, failed 0, lost 0, released 0"
    assert "supervisor" not in result.stderr
    [row] = rows(engine)
    assert len(command.running_pids()) == 1 and row.locked_by.split(":")[1] == str(command.running_pids().pop())


@pytest.mark.parametrize("processes", ["1", "2"])
def test_each_worker_process_runs_with_its_start_up_objects_frozen(command, queue, processes):
    """The command freezes what start-up made (`gc.freeze`) before the worker runs (before the
    fork, with a supervisor): a worker process's collector then has tens of thousands of
    objects it no longer walks."""
    for _ in range(4):
        queue.enqueue("collector", {})
    result = command.run("--processes", processes, "--concurrency", "1", "--until-empty")
    assert result.returncode == 0, result.stderr
    frozen = [int(path.read_text()) for path in command.root.glob("frozen-*")]
    assert frozen and min(frozen) > 10_000, frozen
    thresholds = {int(path.read_text()) for path in command.root.glob("threshold-*")}
    assert thresholds == {YOUNG_GENERATION_THRESHOLD}  # the youngest generation, collected less often


@pytest.mark.parametrize(("threshold", "enabled", "expected"), [
    ((700, 10, 10), True, (YOUNG_GENERATION_THRESHOLD, 10, 10)),  # Python's default: raised
    ((50_000, 5, 5), True, (50_000, 5, 5)),  # an app's own higher threshold: kept
    ((700, 10, 10), False, (700, 10, 10)),  # an app that turned the collector off: left off
])
def test_the_command_raises_only_a_lower_young_generation_threshold(threshold, enabled, expected):
    before, was_enabled = gc.get_threshold(), gc.isenabled()
    try:
        gc.set_threshold(*threshold)
        (gc.enable if enabled else gc.disable)()
        _settle_collector()
        assert (gc.get_threshold(), gc.isenabled()) == (expected, enabled)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
        (gc.enable if was_enabled else gc.disable)()


def test_the_default_is_one_process_per_usable_core(command, queue, engine):
    """Run with one core allowed: one process, no supervisor; the env var overrides the default."""
    queue.enqueue("hold", {})
    command.release()
    one_core = subprocess.run(command.argv("--until-empty"), cwd=command.root, env=command.env,
                              capture_output=True, text=True, timeout=300,
                              preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}))
    assert one_core.returncode == 0, one_core.stderr
    assert "supervisor" not in one_core.stderr
    by_env = command.run("--until-empty", SQLA_QUEUE_PROCESSES="2")
    assert by_env.returncode == 0, by_env.stderr
    assert "starting 2 worker processes" in by_env.stderr


def test_a_killed_worker_process_is_replaced_and_every_job_completes(command, queue, engine):
    for _ in range(4):
        queue.enqueue("hold", {})
    command.start("--processes", "2", "--concurrency", "1", "--lease", "2s")
    first = command.workers(2)
    wait_until(lambda: command.running_pids() == first, "a job running in each process")
    victim = min(first)
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: not alive(victim), "the killed process to be gone")
    replaced = command.workers(2)
    assert victim not in replaced and len(replaced - first) == 1
    command.release()
    wait_until(lambda: statuses(engine) == {"completed"}, "every job to complete")  # the victim's after its lease
    os.kill(command.process.pid, signal.SIGTERM)
    code, out, err = command.finish()
    assert code == 0, err
    assert f"worker process {victim} was killed by SIGKILL" in err
    assert not any(alive(pid) for pid in first | replaced)


def test_sigterm_lets_running_jobs_finish_then_exits_with_no_process_left(command, queue, engine):
    for _ in range(4):
        queue.enqueue("hold", {})
    command.start("--processes", "2", "--concurrency", "1")
    workers = command.workers(2)
    wait_until(lambda: command.running_pids() == workers, "a job running in each process")
    os.kill(command.process.pid, signal.SIGTERM)
    wait_until(lambda: command.stderr().count("the supervisor got SIGTERM, finishing running jobs") == 2,
               "both processes to be told")
    assert command.process.poll() is None  # waiting for the running jobs
    command.release()
    code, out, err = command.finish()
    assert code == 0, err
    assert out.strip() == "claimed 2, completed 2, retried 0, failed 0, lost 0, released 0"
    assert sorted(row.status for row in rows(engine)) == ["completed", "completed", "pending", "pending"]
    assert not any(alive(pid) for pid in workers)


@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_normal_sigterm_logs_no_warning(command, queue, engine, processes):
    """Stopping a worker is routine (every deploy): INFO says so, WARNING is for trouble."""
    queue.enqueue("hold", {})
    command.start("--processes", processes, "--concurrency", "1")
    if processes == "2":
        command.workers(2)
    wait_until(lambda: len(command.running_pids()) == 1, "the job running")
    os.kill(command.process.pid, signal.SIGTERM)
    wait_until(lambda: "SIGTERM" in command.stderr(), "the signal to be logged")
    command.release()
    code, out, err = command.finish()
    assert code == 0, err
    assert out.strip() == "claimed 1, completed 1, retried 0, failed 0, lost 0, released 0"
    told = [line for line in err.splitlines() if "SIGTERM" in line]
    assert told and all(" INFO " in line for line in told), err
    assert [line for line in err.splitlines() if " WARNING " in line or " ERROR " in line] == []


def test_sigkill_of_the_supervisor_ends_its_worker_processes(command, queue, engine):
    command.start("--processes", "2")
    workers = command.workers(2)
    wait_until(lambda: command.stderr().count("serving default") == 2, "both workers to run")
    command.process.kill()
    command.process.wait()
    wait_until(lambda: not any(alive(pid) for pid in workers), "the orphaned worker processes to exit")
    assert command.stderr().count("SIGTERM received, finishing running jobs") == 2  # PR_SET_PDEATHSIG


def test_a_crash_loop_at_start_gives_up_with_a_message(command, queue, engine):
    for _ in range(12):
        queue.enqueue("crash", {})
    command.start("--processes", "2", "--concurrency", "1")
    code, out, err = command.finish(timeout=300)
    assert code == 1
    assert "Error: worker processes keep dying at start: 5 in a row died within 10s of starting" in err
    assert out == ""
    assert children_of(command.process.pid) == set()


@pytest.mark.parametrize(("value", "says"), [
    ("0", "0 is not in the range 1<=x<=1024"),
    ("-3", "-3 is not in the range 1<=x<=1024"),
    ("two", "'two' is not a valid integer"),
    ("1.5", "'1.5' is not a valid integer"),
    ("100000", "100000 is not in the range 1<=x<=1024"),
])
def test_bad_process_counts_are_refused_and_nothing_is_claimed(command, queue, engine, value, says):
    queue.enqueue("hold", {})
    for result in (command.run("--processes", value, "--until-empty"),
                   command.run("--until-empty", SQLA_QUEUE_PROCESSES=value)):
        assert result.returncode == 2
        assert "Invalid value for '--processes'" in result.stderr and says in result.stderr
        assert result.stdout == ""
    assert [row.status for row in rows(engine)] == ["pending"]
