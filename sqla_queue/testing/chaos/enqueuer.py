"""An enqueuer process: ``python -m sqla_queue.testing.chaos.enqueuer SEED JOBS SLOT LOG``
(the database URL in ``SQLA_QUEUE_CHAOS_DATABASE_URL``).

It enqueues its share of the schedule's items one ``enqueue()`` (one commit) at a time, paced
over the fault window (the --app's jobs, with ``SQLA_QUEUE_CHAOS_APP`` set), and writes to LOG an ``intent`` line before each call and an ``ack`` line
(with the id) after the call returned, that is after the commit. A call that raised (its backend
terminated, the server restarting) is tried again under a new ``try`` number; a killed enqueuer
is started again and resumes after its last acknowledged item. So a job whose ``(n, try)`` has an
intent and no ack is *in doubt*: the call may or may not have committed. Each job's ``meta``
carries its ``(n, try)`` (`call_meta`), for the checker, leaving an app's payloads as they are.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

import sqla_queue as sq

from . import app, events
from .schedule import APP_KIND, WINDOW, Item, Schedule, make_schedule
from .workload import DATABASE_URL_ENV, EVENTS_ENV, TASKS, run_queue

APPLICATION_NAME = "sqlaq-chaos-enqueuer"
GIVE_UP_AFTER = 60.0  # seconds of failed calls for one item (a server restart takes a few)


def call_meta(n: int, attempt: int) -> dict:
    """Which enqueue call made a row: item `n`'s try `attempt`."""
    return {"chaos_n": n, "chaos_try": attempt}


def job(item: Item, seed: int, made_by: app.App | None) -> tuple[str, dict, dict]:
    """(task, payload, enqueue options) of `item`: the app's job, or a built-in kind's."""
    if item.kind == APP_KIND:
        task, payload = app.job_of(made_by, seed, item.n)
        return task, dict(payload), {}
    payload = {"sleep": item.sleep, "fail_attempts": item.fail_attempts, "pause": item.pause,
               "snoozes": item.snoozes, "snooze": item.snooze}
    return TASKS[item.kind], payload, {"idempotency_key": item.key, "max_attempts": item.max_attempts,
                                       "delay": item.delay or None}


def run(schedule: Schedule, slot: int, log: Path, database_url: str) -> None:
    url = make_url(database_url).update_query_dict({"application_name": APPLICATION_NAME})
    queue = run_queue(url.render_as_string(hide_password=False), os.environ.get(EVENTS_ENV, os.devnull))
    spec = os.environ.get(app.APP_ENV)
    made_by = app.load(spec) if spec else None
    mine = [item for item in schedule.items if item.enqueuer == slot]
    done, tries = _progress(log)
    pause = WINDOW * 0.5 / max(len(mine), 1)
    for item in mine:
        if item.n not in done:
            tries[item.n] = _enqueue(queue, item, job(item, schedule.seed, made_by), tries.get(item.n, 0), log)
            time.sleep(pause)


def _enqueue(queue, item: Item, made: tuple[str, dict, dict], tried: int, log: Path) -> int:
    task, payload, options = made
    give_up = time.monotonic() + GIVE_UP_AFTER
    while True:
        tried += 1
        events.append(log, "intent", n=item.n, attempt=tried)
        try:
            job_id = queue.enqueue(task, payload, meta=call_meta(item.n, tried), **options)
        except (sq.DatabaseError, sa_exc.OperationalError, sa_exc.InterfaceError) as error:
            events.append(log, "enqueue_error", n=item.n, attempt=tried, error=type(error).__name__)
            if time.monotonic() > give_up:
                raise
            time.sleep(0.1)
            continue
        events.append(log, "ack", n=item.n, attempt=tried, job=job_id)
        return tried


def _progress(log: Path) -> tuple[set[int], dict[int, int]]:
    """Items already acknowledged, and the last try of each item, from an earlier life's log."""
    done, tries = set(), {}
    for line in events.read(log):
        if line["event"] == "intent":
            tries[line["n"]] = max(tries.get(line["n"], 0), line["attempt"])
        elif line["event"] == "ack":
            done.add(line["n"])
    return done, tries


if __name__ == "__main__":
    seed, jobs, slot, log_path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    run(make_schedule(seed, jobs, app=bool(os.environ.get(app.APP_ENV))), slot, log_path, os.environ[DATABASE_URL_ENV])
