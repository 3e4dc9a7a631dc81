"""The background work of a worker, in one shape: a `Service` (a config validated when built,
`run_once()` doing one unit of work and returning a result tests assert on, `run_if_due()`
the periodic pass, `next_due()`), and the one `Looper` that runs services when they are due.

A worker runs three loopers: its claim loop runs recovery, pruning, scheduling and sampling
between rounds (`Looper.run_due`); the lease keeper and the listener each get a thread
(`Looper.run`). Each service takes the small part of the core it needs (the outcomes, the
executor, the schedules), never the `Queue`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from ..errors import PermissionDeniedError

logger = logging.getLogger("sqla_queue.worker")


class Service(Protocol):
    """One kind of background work.

    `run_once` does one unit of work now (a batch, a renewal, a LISTEN session) and returns what
    it did. `run_if_due` is the periodic pass: it runs when `next_due` (a monotonic time; None:
    never) has come, keeps the service's own schedule (so a pass that failed can be retried at
    once, like recovery, or not, like pruning) and returns its result, or None when not due. A
    database error propagates to whoever runs it: the claim loop backs off, a thread's looper
    logs it. A `PermissionDeniedError` (the role lacks a grant) propagates too, and stops the
    worker: no retry can grant it."""

    def run_once(self) -> Any: ...

    def run_if_due(self) -> Any: ...

    def next_due(self) -> float | None: ...


class Looper:
    """Runs `services` when they are due, handing each pass's result to `report` (if given).
    On its own thread (`run`), a pass refused for lack of a privilege ends the loop and goes
    to `halt` (the worker stops with it), where any other failure is logged and tried again."""

    def __init__(self, services: Iterable[Service], *, report: Callable[[Service, Any], None] | None = None,
                 halt: Callable[[PermissionDeniedError], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.services = tuple(services)
        self._report = report
        self._halt = halt
        self._clock = clock

    def run_due(self) -> None:
        """Each service's periodic pass, in order (each decides whether it is due)."""
        for service in self.services:
            result = service.run_if_due()
            if result is not None and self._report is not None:
                self._report(service, result)

    def seconds_until_due(self) -> float | None:
        """How long until the first service is due (0 if one is); None when none ever is."""
        dues = [due for due in (service.next_due() for service in self.services) if due is not None]
        return None if not dues else max(0.0, min(dues) - self._clock())

    def run(self, stop: threading.Event, *, longest_sleep: float = 1.0) -> None:
        """A thread's loop until `stop` is set: sleep until the next service is due (at most
        `longest_sleep`), then `run_due`. A pass that raises is logged and the loop goes on,
        except for a `PermissionDeniedError`: retrying cannot grant the privilege, so the loop
        ends and hands the error to `halt` (without one, it is logged)."""
        while True:
            wait = self.seconds_until_due()
            if stop.wait(longest_sleep if wait is None else min(wait, longest_sleep)):
                return
            try:
                self.run_due()
            except PermissionDeniedError as exc:
                if self._halt is None:
                    logger.error("background pass refused, stopping it: the database role lacks a privilege: %s", exc)
                else:
                    self._halt(exc)
                return
            except Exception:
                logger.exception("background pass failed; trying again")
