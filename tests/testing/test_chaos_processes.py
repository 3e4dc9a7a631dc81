"""The chaos runner's process handling, on real processes: a worker that paused itself is
resumed when its pause is over, and a slot killed by a fault is started again."""

from __future__ import annotations

import subprocess
import sys
import time

import os

from sqla_queue.testing.chaos.processes import SelfPauses, Slot, cpu_storm

PAUSING = """
import os, signal, sys
from sqla_queue.testing.chaos import events
events.append(sys.argv[1], "self_pause", job=1, attempt=1, seconds=0.3)
os.kill(os.getpid(), signal.SIGSTOP)
print("resumed")
"""


def tick_until(condition, ticking, timeout: float = 30.0) -> None:
    give_up = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < give_up, "timed out"
        ticking(time.monotonic())
        time.sleep(0.02)


def test_a_process_that_paused_itself_is_resumed_after_its_pause(tmp_path):
    trace = tmp_path / "events.jsonl"
    pauses = SelfPauses(trace)
    child = subprocess.Popen([sys.executable, "-c", PAUSING, str(trace)], stdout=subprocess.PIPE, text=True)
    try:
        tick_until(lambda: pauses.due, pauses.tick)
        assert list(pauses.due) == [child.pid]
        tick_until(lambda: child.poll() is not None, pauses.tick)
        assert child.stdout.read().strip() == "resumed"
        assert pauses.due == {}
    finally:
        child.kill()
        child.wait()


def test_a_killed_slot_starts_again_after_its_delay_and_a_finished_one_stays_finished(tmp_path):
    slot = Slot("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], {}, tmp_path / "sleeper.log")
    done = Slot("done", [sys.executable, "-c", "pass"], {}, tmp_path / "done.log")
    try:
        slot.start()
        done.start()
        first = slot.pid
        slot.kill(restart_after=0.2)
        assert not slot.alive()
        tick_until(slot.alive, slot.tick)
        assert slot.pid != first and slot.lives == [first, slot.pid]
        done.process.wait()
        done.tick(time.monotonic() + 10)
        assert done.finished() and done.lives == [done.pid]
    finally:
        slot.ask_to_stop()
        slot.reap(time.monotonic() + 5)
    assert slot.process.poll() is not None


LEADER = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""


def test_the_end_of_a_run_kills_the_orphans_of_a_killed_and_stopped_leader(tmp_path):
    """A supervisor stopped (with its children) and then killed leaves its children behind, in
    the old session, while its successor runs in a new one; reaping the slot ends both."""
    slot = Slot("leader", [sys.executable, "-c", LEADER], {}, tmp_path / "leader.log")
    slot.start()
    tick_until(lambda: (tmp_path / "leader.log").read_text().strip(), lambda now: None)
    orphan = int((tmp_path / "leader.log").read_text().split()[0])
    slot.stop(resume_after=60)
    slot.kill(restart_after=0.0)  # the leader alone, as kill_supervisor does; a new one starts
    tick_until(slot.alive, slot.tick)
    assert _running(orphan) and len(slot.lives) == 2
    slot.ask_to_stop()
    slot.reap(time.monotonic())
    tick_until(lambda: not _running(orphan), lambda now: None)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_a_cpu_storm_is_twice_the_cpus_and_ends_by_itself():
    storm = cpu_storm(0.3)
    try:
        assert len(storm) == 2 * os.cpu_count()
        assert all(busy.poll() is None for busy in storm)  # spinning
        assert [busy.wait(timeout=30) for busy in storm] == [0] * len(storm)
    finally:
        for busy in storm:
            busy.kill()
            busy.wait()
