"""Several worker processes from one command (``sqla-queue worker --processes N``): a supervisor
that forks them, restarts one that dies, passes shutdown on, and adds up their summaries.

Python runs one thread of Python code at a time, so handlers that burn CPU use one core per
process; this is how one command uses every core. The supervisor itself runs no job:

* **Start.** The host application was imported before `supervise` is called (an import error
  is reported once, not by every process) and no database connection was opened. Each child
  is forked, builds its own worker, and so its own connections (``make_worker`` disposes any
  pool the parent's import filled, without closing the parent's sockets). Children get
  ``PR_SET_PDEATHSIG`` (Linux): if the supervisor is killed outright, they receive SIGTERM
  and drain as after a first signal. Elsewhere they notice the supervisor's end of their
  control socket closing and do the same.
* **Restarts.** A child killed by a signal or exiting non-zero is started again after a
  backoff. One that dies within `START_SECONDS` of its start failed to start; after
  `START_RETRIES` such failures in a row in one slot the supervisor gives up: it stops the
  other children and reports the crash loop (exit 1). A child that exits 0 (``until_empty``:
  it found nothing left) is not restarted. Nor is one the database refused a privilege
  (`PermissionDeniedError`): it says so over its control socket and the supervisor gives up at
  once, since every restart would be refused the same way.
* **Shutdown.** The first SIGTERM/SIGINT tells every child to stop claiming and finish its
  running jobs within its grace period; the supervisor exits once they have. A second one
  tells them to exit at once (exit code 128 + the signal number), as a second signal does to
  one worker. The message goes over each child's control socket rather than as a signal: a
  child may also get the signal itself (Ctrl-C reaches the whole process group, systemd
  signals every process of a unit), and a forwarded copy would then count as its second.
* **Summary.** Each child sends its `WorkerSummary` back over its socket when it ends; the
  supervisor returns their sum (a child that crashed sends none).
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING

from ..db import notifier
from ..errors import PermissionDeniedError
from .config import WorkerSummary

if TYPE_CHECKING:
    from .worker import Worker

logger = logging.getLogger("sqla_queue.supervisor")

START_SECONDS = 10.0
"""A child that dies sooner than this after its start failed to start."""
START_RETRIES = 5
"""Failed starts in a row, in one slot, after which the supervisor gives up."""
RESTART_BACKOFF = (0.5, 1.0, 2.0, 4.0)
"""Seconds before a child is started again, by how many failed starts preceded it."""
SAFETY_WAKE = 5.0
"""The supervisor's longest sleep: a lost wake-up costs at most this long."""

_STOP, _EXIT = "stop", "exit"
DENIED = "denied"
"""The key of the line a child sends when the database refused it a privilege."""
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_HANDLED = (signal.SIGTERM, signal.SIGINT)


@dataclass
class SupervisorResult:
    """How the children ended: the sum of the summaries they sent, the exit code the command
    should end with, and what went wrong (None when every child drained and exited 0)."""

    summary: WorkerSummary
    exit_code: int = 0
    problem: str | None = None


@dataclass
class _Slot:
    """One of the N places a child runs in, across its restarts."""

    number: int
    pid: int | None = None
    control: socket.socket | None = None
    started: float = 0.0
    failed_starts: int = 0
    restart_at: float | None = None
    done: bool = False
    denied: str | None = None
    received: bytearray = field(default_factory=bytearray)


def supervise(make_worker: Callable[[], Worker], processes: int, *, until_empty: bool = False,
              report_error: Callable[[BaseException], int] | None = None) -> SupervisorResult:
    """Run `processes` children, each ``make_worker().run(until_empty=until_empty)``, until
    they have all ended (see the module docstring). `report_error` turns an exception that
    escaped a child into its exit code, after saying what it was (default: the traceback, 1).
    Call from the main thread, with no database connection open."""
    if processes < 1:
        raise ValueError(f"processes must be at least 1, got {processes}")
    return _Supervisor(make_worker, processes, until_empty, report_error or _traceback_exit).run()


class _Supervisor:
    def __init__(self, make_worker: Callable[[], Worker], processes: int, until_empty: bool,
                 report_error: Callable[[BaseException], int]) -> None:
        self.make_worker = make_worker
        self.until_empty = until_empty
        self.report_error = report_error
        self.slots = [_Slot(n) for n in range(processes)]
        self.signals: list[int] = []
        self.passed_on = 0  # how many of `signals` the children were told about
        self.summary = WorkerSummary()
        self.problems: list[str] = []
        self.gave_up: str | None = None

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> SupervisorResult:
        wake_read, wake_write = socket.socketpair()
        for end in (wake_read, wake_write):
            end.setblocking(False)
        previous = {sig: signal.getsignal(sig) for sig in (*_HANDLED, signal.SIGCHLD)}
        previous_wakeup = signal.set_wakeup_fd(wake_write.fileno(), warn_on_full_buffer=False)
        for sig in _HANDLED:
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGCHLD, _ignore)  # a handler, so that a child's end wakes the loop
        try:
            logger.info("supervisor %s starting %d worker processes", os.getpid(), len(self.slots))
            for slot in self.slots:
                self._start(slot, previous, wake_read, wake_write)
            while self._live() or self._restarts_pending():
                self._pass_on_signals()
                self._start_due(previous, wake_read, wake_write)
                self._reap()
                if self._live() or self._restarts_pending():
                    self._sleep(wake_read)
        finally:
            signal.set_wakeup_fd(previous_wakeup)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            wake_read.close()
            wake_write.close()
        return self._result()

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals.append(signum)  # acted on by the loop, which the wake-up socket wakes

    def _sleep(self, wake_read: socket.socket) -> None:
        due = [slot.restart_at for slot in self.slots if slot.restart_at is not None]
        timeout = SAFETY_WAKE if not due else max(0.0, min(min(due) - time.monotonic(), SAFETY_WAKE))
        if self.signals[self.passed_on:]:
            return
        readable, _, _ = select.select([wake_read], [], [], timeout)
        if readable:
            try:
                while wake_read.recv(512):
                    pass
            except BlockingIOError:
                pass

    def _live(self) -> list[_Slot]:
        return [slot for slot in self.slots if slot.pid is not None]

    def _restarts_pending(self) -> bool:
        return any(slot.restart_at is not None for slot in self.slots)

    # -- signals ---------------------------------------------------------------------------

    def _pass_on_signals(self) -> None:
        """First signal: every child stops claiming and drains; no more restarts. Second:
        every child exits at once."""
        while self.passed_on < len(self.signals):
            signum = self.signals[self.passed_on]
            self.passed_on += 1
            name = signal.Signals(signum).name
            if self.passed_on == 1:
                logger.info("supervisor %s: %s received, telling %d worker process(es) to finish "
                            "their running jobs; send it again to exit at once",
                            os.getpid(), name, len(self._live()))
                self._cancel_restarts()
                self._tell_all(f"{_STOP} the supervisor got {name}")
            else:
                logger.error("supervisor %s: second signal, worker processes exit now; their held "
                             "jobs return when their leases expire", os.getpid())
                self._tell_all(f"{_EXIT} {signum}")

    def _stopping(self) -> bool:
        return bool(self.signals) or self.gave_up is not None

    def _cancel_restarts(self) -> None:
        for slot in self.slots:
            slot.restart_at = None

    def _tell_all(self, message: str) -> None:
        for slot in self._live():
            try:
                slot.control.sendall(message.encode() + b"\n")
            except OSError:  # it is ending already; its exit is reaped as usual
                pass

    # -- children --------------------------------------------------------------------------

    def _start_due(self, previous: dict, wake_read: socket.socket, wake_write: socket.socket) -> None:
        now = time.monotonic()
        for slot in self.slots:
            if slot.restart_at is not None and slot.restart_at <= now and not self._stopping():
                slot.restart_at = None
                self._start(slot, previous, wake_read, wake_write)

    def _start(self, slot: _Slot, previous: dict, wake_read: socket.socket, wake_write: socket.socket) -> None:
        """Fork a child for `slot`. Signals are blocked across the fork, so the child never
        runs the supervisor's handlers: it gets the command's own back before unblocking."""
        ours, theirs = socket.socketpair()
        sys.stdout.flush()
        sys.stderr.flush()
        parent = os.getpid()
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, (*_HANDLED, signal.SIGCHLD))
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 1
            try:
                signal.set_wakeup_fd(-1)
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
                for other in (ours, wake_read, wake_write, *(s.control for s in self._live())):
                    other.close()
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                code = _child(self.make_worker, self.until_empty, theirs, parent, self.report_error)
            finally:
                _send_pending_wake_ups()
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        theirs.close()
        ours.setblocking(False)
        slot.pid, slot.control, slot.started = pid, ours, time.monotonic()
        slot.received.clear()
        logger.info("supervisor %s: worker process %d started (%d of %d)", parent, pid, slot.number + 1,
                    len(self.slots))

    def _reap(self) -> None:
        """Collect every child that ended, and decide on each one's slot."""
        by_pid = {slot.pid: slot for slot in self._live()}
        while by_pid:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            slot = by_pid.pop(pid, None)
            if slot is not None:
                self._ended(slot, status)

    def _ended(self, slot: _Slot, status: int) -> None:
        pid, ran = slot.pid, time.monotonic() - slot.started
        self._read_summary(slot)
        slot.pid = None
        code = os.waitstatus_to_exitcode(status)
        if code == 0:
            slot.done = True
            return
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with {code}"
        if slot.denied is not None and not self._stopping():
            self._give_up(f"worker process {pid} stopped: the database role lacks a privilege: {slot.denied}; "
                          "no restart can grant it (docs/how-to/database-roles.md)")
            return
        if self._stopping():
            self.problems.append(f"worker process {pid} {how} while stopping")
            return
        slot.failed_starts = slot.failed_starts + 1 if ran < START_SECONDS else 0
        if slot.failed_starts >= START_RETRIES:
            self._give_up(f"worker processes keep dying at start: {slot.failed_starts} in a row died within "
                          f"{START_SECONDS:g}s of starting (the last one, {pid}, {how}); see their errors above")
            return
        delay = RESTART_BACKOFF[min(slot.failed_starts, len(RESTART_BACKOFF) - 1)]
        slot.restart_at = time.monotonic() + delay
        logger.error("supervisor %s: worker process %d %s after %.1fs; starting another in %gs",
                     os.getpid(), pid, how, ran, delay)

    def _give_up(self, reason: str) -> None:
        logger.error("supervisor %s: %s; stopping the others", os.getpid(), reason)
        self.gave_up = reason
        self._cancel_restarts()
        self._tell_all(f"{_STOP} the supervisor is giving up")

    def _read_summary(self, slot: _Slot) -> None:
        """What the child sent before it ended: its summary, one JSON line (none if it crashed)."""
        try:
            while chunk := slot.control.recv(65536):
                slot.received += chunk
        except (BlockingIOError, OSError):
            pass
        slot.control.close()
        slot.control = None
        for line in bytes(slot.received).splitlines():
            try:
                counts = json.loads(line)
            except ValueError:
                continue
            if isinstance(counts, dict) and DENIED in counts:
                slot.denied = str(counts[DENIED])
                continue
            for f in fields(WorkerSummary):
                setattr(self.summary, f.name, getattr(self.summary, f.name) + int(counts.get(f.name, 0)))

    def _result(self) -> SupervisorResult:
        if len(self.signals) > 1:
            return SupervisorResult(self.summary, 128 + self.signals[-1], "exited at once on a second signal")
        if self.gave_up is not None:
            return SupervisorResult(self.summary, 1, self.gave_up)
        if self.problems:
            return SupervisorResult(self.summary, 1, "; ".join(self.problems))
        return SupervisorResult(self.summary)


def _ignore(signum: int, frame: object) -> None:
    """SIGCHLD's handler: the wake-up socket carries the news."""


# -- in the child ------------------------------------------------------------------------------


def _child(make_worker: Callable[[], Worker], until_empty: bool, control: socket.socket, parent: int,
           report_error: Callable[[BaseException], int]) -> int:
    """A child's life: follow the supervisor's end, build a worker (its own connections), run
    it while obeying the control socket, send the summary back. Returns the exit code."""
    die_with_parent()
    if os.getppid() != parent:  # the supervisor died before the line above took effect
        return 1
    try:
        worker = make_worker()
        finished = threading.Event()
        threading.Thread(target=_obey, args=(control, worker, finished), name="sqla-queue-supervised",
                         daemon=True).start()
        summary = worker.run(until_empty=until_empty)
        finished.set()
        control.sendall(json.dumps(asdict(summary)).encode() + b"\n")
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except PermissionDeniedError as exc:  # no restart grants it: tell the supervisor not to try
        try:
            control.sendall(json.dumps({DENIED: str(exc)}).encode() + b"\n")
        except OSError:
            pass
        return report_error(exc)
    except BaseException as exc:  # said once, by this child; the supervisor sees the exit code
        try:
            return report_error(exc)
        except BaseException:
            return _traceback_exit(exc)


def _send_pending_wake_ups() -> None:
    """A child ends with ``os._exit`` (no atexit): jobs its handlers enqueued still get their
    wake-up."""
    notifier.flush_all()


def die_with_parent() -> None:
    """Linux: this process gets SIGTERM when the one that forked it dies (``PR_SET_PDEATHSIG``),
    so a SIGKILLed supervisor leaves no worker behind. A no-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        logger.warning("worker process %d: prctl(PR_SET_PDEATHSIG) failed (errno %d); it will outlive a "
                       "killed supervisor until its control socket closes", os.getpid(), ctypes.get_errno())


def _obey(control: socket.socket, worker: Worker, finished: threading.Event) -> None:
    """The control thread: ``stop REASON`` drains the worker, ``exit SIGNUM`` ends the process
    at once; the supervisor's end closing (it died) counts as a stop."""
    stopping = False
    for message in _lines(control):
        command, _, detail = message.partition(" ")
        if command == _EXIT:
            logger.error("worker %s: the supervisor got a second signal, exiting now; held jobs return "
                         "when their lease expires", worker.worker_id)
            logging.shutdown()
            os._exit(128 + int(detail))
        if command == _STOP and not stopping:
            stopping = True
            logger.info("worker %s: %s, finishing running jobs (grace %ss)", worker.worker_id, detail,
                        worker.config.shutdown_grace)
            threading.Thread(target=_stop_until_finished, args=(worker, finished), daemon=True).start()
    if not stopping and not finished.is_set():
        logger.warning("worker %s: the supervisor is gone, finishing running jobs (grace %ss)",
                       worker.worker_id, worker.config.shutdown_grace)
        _stop_until_finished(worker, finished)


def _stop_until_finished(worker: Worker, finished: threading.Event) -> None:
    """`Worker.stop` until `run` returns: a stop that arrives before `run` has started would
    otherwise be forgotten when it starts."""
    worker.stop()
    while not finished.wait(0.5):
        worker.stop()


def _lines(control: socket.socket):
    """The control socket's lines, until the supervisor's end closes."""
    buffer = b""
    while True:
        try:
            chunk = control.recv(4096)
        except OSError:
            return
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode()


def _traceback_exit(exc: BaseException) -> int:
    logger.error("worker process %d failed", os.getpid(), exc_info=exc)
    return 1
