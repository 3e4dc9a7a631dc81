"""The run's processes, one `Slot` each: CLI workers, the supervisor and enqueuers, each in a
session of its own (so a supervisor's children are signalled with it and cleaned up with it).
A slot a fault killed is started again after the fault's delay: the workload goes on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .schedule import LEASE

APP = "sqla_queue.testing.chaos.workload:queue"
WORKER_OPTIONS = ("--concurrency", "3", "--lease", f"{LEASE}s", "--poll-interval", "0.2s", "--grace", "1s",
                  "--log-level", "INFO")


def worker_argv(processes: int = 1, *, until_empty: bool = False) -> list[str]:
    argv = [sys.executable, "-m", "sqla_queue.cli", "--app", APP, "worker", *WORKER_OPTIONS,
            "--processes", str(processes)]  # 1: the worker in the process itself, no supervisor
    return argv + (["--until-empty"] if until_empty else [])


def cpu_storm(seconds: float) -> list[subprocess.Popen]:
    """Busy processes, twice as many as the CPUs, each spinning for `seconds` and then exiting:
    the workers get a fraction of a CPU, so every timer of theirs fires late."""
    spin = f"import time\nend = time.monotonic() + {float(seconds)!r}\nwhile time.monotonic() < end: pass"
    return [subprocess.Popen([sys.executable, "-c", spin], stdin=subprocess.DEVNULL)
            for _ in range(2 * (os.cpu_count() or 1))]


def enqueuer_argv(seed: int, jobs: int, slot: int, log: Path) -> list[str]:
    return [sys.executable, "-m", "sqla_queue.testing.chaos.enqueuer", str(seed), str(jobs), str(slot), str(log)]


@dataclass
class Slot:
    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    restart: bool = True  # keep it running: start it again when it dies (exit status 0 is done)
    process: subprocess.Popen | None = None
    start_at: float | None = None   # monotonic time of a pending restart
    resume_at: float | None = None  # monotonic time of a pending SIGCONT
    lives: list[int] = field(default_factory=list)  # pids, in order

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        self.lives.append(self.process.pid)
        self.start_at = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def finished(self) -> bool:
        return self.process is not None and self.process.poll() == 0

    def kill(self, restart_after: float, *, group: bool = False) -> None:
        """SIGKILL; `group`: the whole session (otherwise the process alone, orphaning children
        the way a crashed supervisor does; they get PR_SET_PDEATHSIG's SIGTERM)."""
        if self.alive():
            self._signal(signal.SIGKILL, group)
            self.process.wait()
        if self.resume_at is not None:  # killed while stopped: its orphans must run to drain
            self._signal(signal.SIGCONT, True)
        self.resume_at = None
        self.start_at = time.monotonic() + restart_after

    def stop(self, resume_after: float) -> None:
        """SIGSTOP the whole session (a supervisor with its children, like a frozen container)."""
        if self.alive() and self.resume_at is None:
            self._signal(signal.SIGSTOP, True)
            self.resume_at = time.monotonic() + resume_after

    def resume(self) -> None:
        if self.process is not None:
            self._signal(signal.SIGCONT, True)
        self.resume_at = None

    def tick(self, now: float) -> None:
        """Resume a stopped slot, restart a dead one, when due."""
        if self.resume_at is not None and now >= self.resume_at:
            self.resume()
        if self.start_at is not None and now >= self.start_at:
            self.start()
        elif self.restart and self.process is not None and self.process.poll() not in (None, 0) \
                and self.start_at is None:
            self.start_at = now + 0.2  # died of something else (a restarting server): keep it going

    def ask_to_stop(self) -> None:
        """At the end: no more restarts; SIGCONT the session, SIGTERM the process (graceful)."""
        self.restart, self.start_at, self.resume_at = False, None, None
        if self.process is not None:
            self._signal(signal.SIGCONT, True)
            self._signal(signal.SIGTERM, False)

    def reap(self, deadline: float) -> None:
        """Wait for a graceful exit until `deadline` (monotonic), then SIGKILL what is left of
        the session, orphaned children included."""
        if self.process is None:
            return
        try:
            self.process.wait(max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            pass
        for pid in self.lives:  # every session it ever started: a killed supervisor's orphans too
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()


    def _signal(self, signum: int, group: bool) -> None:
        try:
            if group:
                os.killpg(self.process.pid, signum)
            else:
                self.process.send_signal(signum)
        except ProcessLookupError:
            pass


def stop_all(slots, grace: float) -> None:
    for slot in slots:
        slot.ask_to_stop()
    deadline = time.monotonic() + grace
    for slot in slots:
        slot.reap(deadline)


class SelfPauses:
    """Worker processes that stopped themselves (a pausing job's first attempt writes a
    ``self_pause`` line to the trace, then SIGSTOPs its own process): each is resumed when its
    pause is over. The trace is read as it grows, whole lines only."""

    def __init__(self, trace: Path) -> None:
        self.trace = trace
        self.offset = 0
        self.due: dict[int, float] = {}  # pid -> monotonic time of its SIGCONT

    def tick(self, now: float) -> None:
        self._read(now)
        for pid, at in list(self.due.items()):
            if now >= at:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                del self.due[pid]

    def _read(self, now: float) -> None:
        try:
            with open(self.trace, "rb") as trace:
                trace.seek(self.offset)
                data = trace.read()
        except FileNotFoundError:
            return
        whole = data[:data.rfind(b"\n") + 1]
        self.offset += len(whole)
        for line in whole.splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("event") == "self_pause":
                late = max(time.time() - event["t"], 0.0)
                self.due[event["pid"]] = now + event["seconds"] - late
