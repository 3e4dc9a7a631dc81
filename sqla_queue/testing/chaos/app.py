"""Your own handlers under the fault schedules: ``--app module.path:attribute`` names an `App`,
and the runner's workers run your queue's tasks instead of the built-in workload.

The runner still owns the database (a fresh one per seed, on its own PostgreSQL), so your queue
is rebound to it in every process, like `sqla_queue.testing.bind` does in a test; your
``sessionmakers`` are rebound with it, so ``ctx.transaction()`` and your own sessions write to
the seed's database, where the checker reads. What the checker can judge for your handlers:
``lost``, ``duplicated``, ``stuck`` and ``unexpected``. Effects are the built-in workload's
table, so ``duplicate_effects`` and ``missing_effects`` stay 0 for an app.
"""

from __future__ import annotations

import atexit
import importlib
import json
import random
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from sqla_queue.queue import Queue
from sqla_queue.testing.binding import bind

APP_ENV = "SQLA_QUEUE_CHAOS_APP"  # the --app spec, for the worker and enqueuer processes

JobMaker = Callable[[random.Random, int], tuple[str, Mapping[str, Any]]]


@dataclass(frozen=True)
class App:
    """What the runner needs of your application.

    :param queue: your `Queue`, its tasks registered.
    :param job: ``job(rng, n)`` gives the n-th job of the workload of a seed as ``(task name,
        payload)``; draw from `rng` (seeded by the seed and `n`) so a replay enqueues the same jobs.
    :param setup: ``setup(engine)``, run once on the migrated template database every seed's
        database is copied from: create the tables your handlers write.
    :param sessionmakers: your ``sessionmaker`` objects, rebound to each seed's database.
    """

    queue: Queue
    job: JobMaker
    setup: Callable[[Engine], None] | None = None
    sessionmakers: tuple[Any, ...] = ()


class AppError(ValueError):
    """The --app spec, or what it names, is not usable; the message says what is wrong."""


def load(spec: str) -> App:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise AppError(f"{spec!r} is not of the form module.path:attribute")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the app's own import failed: say which and why, in one line
        raise AppError(f"importing {module_name!r} failed: {type(exc).__name__}: {exc}") from None
    try:
        app = getattr(module, attribute)
    except AttributeError:
        raise AppError(f"module {module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(app, App):
        raise AppError(f"{spec} is a {type(app).__name__}, not a sqla_queue.testing.chaos.App")
    return app


def job_of(app: App, seed: int, n: int) -> tuple[str, Mapping[str, Any]]:
    """The n-th job of `seed`'s workload, the same on every call and in every process."""
    return app.job(random.Random(f"sqla_queue-chaos-{seed}-job-{n}"), n)


def check_jobs(app: App, seed: int, jobs: int) -> None:
    """Before anything starts: every job the workload would enqueue names a registered task and
    has a JSON object for a payload, so a mistake is one clear error, not a crashed enqueuer."""
    known = set(app.queue.task_names)
    for n in range(jobs):
        try:
            made = job_of(app, seed, n)
        except Exception as exc:  # the app's own function failed: name the job and the error, no traceback
            raise AppError(f"job({n}) raised {type(exc).__name__}: {exc}") from None
        if not (isinstance(made, tuple) and len(made) == 2):
            raise AppError(f"job({n}) returned {made!r}, not a (task name, payload) tuple")
        task, payload = made
        if task not in known:
            raise AppError(f"job({n}) names task {task!r}, which the app's queue has not registered "
                           f"(registered: {', '.join(sorted(known)) or 'none'})")
        if not isinstance(payload, Mapping):
            raise AppError(f"job({n}) gave a {type(payload).__name__} payload, not a mapping")
        try:
            json.dumps(payload)
        except (TypeError, ValueError) as exc:
            raise AppError(f"job({n}) gave a payload that is not JSON: {exc}") from None


_bound = ExitStack()  # a worker or enqueuer process keeps its binding for its whole life...
atexit.register(_bound.close)  # ...and closes its pools before the interpreter tears down


def bound_queue(app: App, database_url: str, observer: object | None) -> Queue:
    """`app`'s queue on the seed's database, with the runner's trace `observer` registered."""
    queue = _bound.enter_context(bind(app.queue, database_url, *app.sessionmakers))
    if observer is not None:
        queue.plugin_manager.register(observer)
    return queue
