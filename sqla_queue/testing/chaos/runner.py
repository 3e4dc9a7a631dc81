"""One seed, start to verdict: a database of its own, the processes, the schedule's faults on
time, the heal, then the checker. The server is the runner's own (`embedded_server`), since a
fault restarts it; seeds run one after another on it, each in a fresh copy of a migrated
template database."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine, column, create_engine, func, select, table
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

import sqla_queue as sq
from sqla_queue.testing import EmbeddedServer, copied_database, embedded_server, migrated_database

from . import events
from .app import APP_ENV, App
from .checker import TERMINAL, Verdict, classify, observe
from .enqueuer import APPLICATION_NAME as ENQUEUER_NAME
from .processes import SelfPauses, Slot, cpu_storm, enqueuer_argv, stop_all, worker_argv
from .proxy import TcpProxy
from .schedule import ENQUEUERS, LEASE, WINDOW, WORKERS, Fault, make_schedule
from .workload import DATABASE_URL_ENV, EVENTS_ENV, effects_metadata

# fsync off is safe here (a restart is not a power loss: the OS keeps what was written);
# synchronous_commit stays on, else an immediate restart may drop acknowledged commits.
SERVER_SETTINGS = {"fsync": "off", "max_connections": "200"}
WORKER_BACKENDS = "sqla-queue%"  # the workers' default application_name
RUNNER_NAME = "sqlaq-chaos-runner"
HEAL_TIMEOUT = 20.0 + 3 * LEASE  # seconds after the faults for every job to end terminal
TICK = 0.05
RESTART_WAIT = 60.0  # seconds a server whose restart pg_ctl called failed gets to come back
_MIGRATING = threading.Lock()  # Alembic's context is module-global: one --parallel stream migrates at a time

activity = table("pg_stat_activity", column("pid"), column("datname"), column("application_name"))


@dataclass(frozen=True)
class SeedResult:
    seed: int
    jobs: int
    verdict: Verdict
    seconds: float
    logs: Path
    app: str | None = None  # the --app spec the seed ran, for its replay command


@contextmanager
def chaos_server(app: App | None = None) -> Iterator[tuple[EmbeddedServer, str]]:
    """The runner's own PostgreSQL and a migrated template database (with the effects table, and
    what the --app's `setup` creates)."""
    with embedded_server(SERVER_SETTINGS) as server, ExitStack() as stack:
        with _MIGRATING:
            template = stack.enter_context(migrated_database(server=server.url))
        engine = create_engine(template, poolclass=NullPool)
        effects_metadata.create_all(engine)
        if app is not None and app.setup is not None:
            app.setup(engine)
        engine.dispose()
        yield server, make_url(template).database


def run_seed(seed: int, jobs: int, server: EmbeddedServer, template: str, out: Path,
             app_spec: str | None = None) -> SeedResult:
    """`app_spec`: an --app's ``module:attribute`` (already checked), whose jobs and handlers
    replace the built-in workload's."""
    started = time.monotonic()
    run_dir = out / f"seed-{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)  # an earlier run's trace must not mix with this one
    run_dir.mkdir(parents=True)
    schedule = make_schedule(seed, jobs, app=app_spec is not None)
    (run_dir / "schedule.json").write_text(schedule.to_json())
    trace, enqueues = run_dir / "events.jsonl", run_dir / "enqueues.jsonl"
    with copied_database(template, server=server.url) as url:
        engine = create_engine(make_url(url).update_query_dict({"application_name": RUNNER_NAME}),
                               poolclass=NullPool, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
        env = {**os.environ, DATABASE_URL_ENV: url, EVENTS_ENV: str(trace), "PYTHONUNBUFFERED": "1"}
        env = {**env, APP_ENV: app_spec} if app_spec else {k: v for k, v in env.items() if k != APP_ENV}
        proxy = TcpProxy(server.host, server.port)
        proxied = make_url(url).set(host=proxy.host, port=proxy.port).render_as_string(hide_password=False)
        slots = _slots(seed, jobs, env, {**env, DATABASE_URL_ENV: proxied}, run_dir, enqueues)
        pauses, targets = SelfPauses(trace), Targets(server, proxy, engine)
        try:
            _run_faults(schedule.faults, slots, pauses, targets, trace)
            events.append(trace, "healing")
            events.append(trace, "healed" if _heal(engine, pauses) else "heal_timed_out")
        finally:
            for busy in targets.storm:
                busy.kill()
                busy.wait()
            proxy.heal()
            stop_all(slots.values(), grace=3.0)
            proxy.close()
            events.append(trace, "stopped")
        verdict = classify(observe(engine, trace, enqueues))
        engine.dispose()
    events.append(trace, "verdict", classes=verdict.classes)
    return SeedResult(seed, jobs, verdict, time.monotonic() - started, run_dir, app_spec)


def _slots(seed: int, jobs: int, env: dict, worker_env: dict, run_dir: Path, enqueues: Path) -> dict[str, Slot]:
    """Workers reach the server through the proxy (`worker_env`), enqueuers directly."""
    slots = {f"worker-{i}": Slot(f"worker-{i}", worker_argv(), worker_env, run_dir / f"worker-{i}.log")
             for i in range(WORKERS)}
    slots["supervisor"] = Slot("supervisor", worker_argv(processes=2), worker_env, run_dir / "supervisor.log")
    for i in range(ENQUEUERS):
        slots[f"enqueuer-{i}"] = Slot(f"enqueuer-{i}", enqueuer_argv(seed, jobs, i, enqueues), env,
                                      run_dir / f"enqueuer-{i}.log")
    return slots


@dataclass
class Targets:
    """What faults other than signals act on: the server, the workers' proxy (and when it heals),
    the runner's own engine (for pg_terminate_backend)."""

    server: EmbeddedServer
    proxy: TcpProxy
    engine: Engine
    heal_network_at: float | None = None
    storm: list = field(default_factory=list)  # a cpu_storm's busy processes

    def tick(self, now: float) -> None:
        if self.heal_network_at is not None and now >= self.heal_network_at:
            self.proxy.heal()
            self.heal_network_at = None
        self.storm = [p for p in self.storm if p.poll() is None]

    @property
    def calm(self) -> bool:
        return self.heal_network_at is None and not self.storm


def _run_faults(faults: tuple[Fault, ...], slots: dict[str, Slot], pauses: SelfPauses, targets: Targets,
                trace: Path) -> None:
    """Start everything, apply each fault at its offset, restart what was killed, resume what was
    stopped; return once the faults are over and the enqueuers are done."""
    for slot in slots.values():
        slot.start()
    start, pending, restarts = time.monotonic(), list(faults), []
    enqueuers = [s for name, s in slots.items() if name.startswith("enqueuer")]
    give_up = start + WINDOW + 120.0
    while True:
        now = time.monotonic()
        while pending and now - start >= pending[0].at:
            fault = pending.pop(0)
            events.append(trace, "fault", kind=fault.kind, slot=fault.slot, duration=fault.duration)
            restarts += _apply(fault, slots, targets, trace)
        for slot in slots.values():
            slot.tick(now)
        pauses.tick(now)
        targets.tick(now)
        calm = not pending and not pauses.due and targets.calm and \
            all(s.resume_at is None and s.start_at is None for s in slots.values())
        if calm and all(s.finished() for s in enqueuers) and not any(t.is_alive() for t in restarts):
            return
        if now > give_up:
            events.append(trace, "gave_up_waiting_for_enqueuers")
            return
        time.sleep(TICK)


def _apply(fault: Fault, slots: dict[str, Slot], targets: Targets, trace: Path) -> list[threading.Thread]:
    kind, target = fault.kind, fault.slot
    if kind == "kill_worker":
        slots[f"worker-{target}"].kill(fault.duration)
    elif kind == "stop_worker":
        slots[f"worker-{target}"].stop(fault.duration)
    elif kind == "kill_supervisor":
        slots["supervisor"].kill(fault.duration)
    elif kind == "stop_supervisor":
        slots["supervisor"].stop(fault.duration)
    elif kind == "kill_enqueuer":
        enqueuer = slots[f"enqueuer-{target}"]
        if not enqueuer.finished():
            enqueuer.kill(fault.duration, group=True)
    elif kind in ("terminate_workers", "terminate_enqueuers"):
        name = activity.c.application_name
        matches = name.like(WORKER_BACKENDS) if kind == "terminate_workers" else name == ENQUEUER_NAME
        ended = _terminate(targets.engine, matches)
        events.append(trace, "terminated", backends=ended)
    elif kind == "restart_server":
        thread = threading.Thread(target=_restart, args=(targets.server, trace), daemon=True)
        thread.start()
        return [thread]
    elif kind == "cpu_storm":
        targets.storm += cpu_storm(fault.duration)
    elif kind == "cut_network":
        events.append(trace, "cut", connections=targets.proxy.cut())
    elif kind in ("stall_network", "refuse_network"):
        if kind == "stall_network":
            targets.proxy.stall()
        else:
            targets.proxy.refuse()
        targets.heal_network_at = time.monotonic() + fault.duration
    return []


def _terminate(engine: Engine, matches) -> int | None:
    """pg_terminate_backend of each backend of the run's database that `matches`."""
    backends = select(activity.c.pid).where(activity.c.datname == func.current_database(),
                                            activity.c.pid != func.pg_backend_pid(), matches)
    try:
        with engine.connect() as conn:
            pids = conn.execute(backends).scalars().all()
            return sum(bool(conn.execute(select(func.pg_terminate_backend(pid))).scalar_one()) for pid in pids)
    except sa_exc.OperationalError:  # the server is restarting: that fault wins
        return None


def _restart(server: EmbeddedServer, trace: Path, wait: float = RESTART_WAIT) -> None:
    """An immediate restart. ``pg_ctl -w restart`` can report failure on a loaded machine while
    the server comes back all the same: then the runner waits for it, and starts it only if it
    never does, so the seed goes on against a live server either way."""
    try:
        server.restart(mode="immediate")
    except subprocess.CalledProcessError as error:
        events.append(trace, "restart_failed", status=error.returncode)
        if not _accepting(server, wait):
            server.start()
    events.append(trace, "server_back")


def _accepting(server: EmbeddedServer, seconds: float) -> bool:
    """Whether the server accepts a connection within `seconds`."""
    engine = create_engine(server.url, poolclass=NullPool, connect_args={"connect_timeout": 2})
    deadline = time.monotonic() + seconds
    try:
        while True:
            try:
                with engine.connect():
                    return True
            except sa_exc.OperationalError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.2)
    finally:
        engine.dispose()


def _heal(engine: Engine, pauses: SelfPauses) -> bool:
    """Wait until every job is terminal (workers keep running, recovering expired leases, and a
    worker that paused itself is still resumed on time), or until HEAL_TIMEOUT: what is left
    then is stuck."""
    jobs = sq.Job.__table__
    unfinished = select(func.count()).select_from(jobs).where(jobs.c.status.not_in(sorted(TERMINAL)))
    deadline = next_check = time.monotonic()
    deadline += HEAL_TIMEOUT
    while (now := time.monotonic()) < deadline:
        pauses.tick(now)
        if now >= next_check:
            next_check = now + 0.25
            try:
                with engine.connect() as conn:
                    if conn.execute(unfinished).scalar_one() == 0 and not pauses.due:
                        return True
            except sa_exc.OperationalError:
                pass
        time.sleep(TICK)
    return False
