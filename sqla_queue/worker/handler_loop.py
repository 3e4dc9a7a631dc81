"""The event loop a worker runs ``async def`` handlers on.

With `Worker.run` (the command line, a script) the worker owns a loop on a thread of its own,
started when the first async job arrives. With `Worker.run_async` it borrows the application's
running loop, so handlers share the application's asyncio resources (its AsyncEngine, HTTP
clients). Either way the claim loop, the lease keeper and the listener stay on their threads:
the same code, deadlines and fault handling for both kinds of handler.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any


class HandlerLoop:
    """An event loop to run handlers on: `own()` (started at first use, closed by `close`) or
    `borrow(loop)` (the caller's; `close` leaves it running)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._loop = loop
        self._owned = loop is None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @classmethod
    def own(cls) -> HandlerLoop:
        return cls(None)

    @classmethod
    def borrow(cls, loop: asyncio.AbstractEventLoop) -> HandlerLoop:
        return cls(loop)

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> None:
        """Run ``callback(*args)`` on the loop (from any thread)."""
        self._started().call_soon_threadsafe(callback, *args)

    def wait_for(self, awaitable: Awaitable[Any]) -> Any:
        """Await `awaitable` on the loop and return its result: for a synchronous handler that
        returned an awaitable (its handler thread waits; an ``async def`` handler holds none)."""
        return asyncio.run_coroutine_threadsafe(_awaited(awaitable), self._started()).result()

    def close(self, timeout: float) -> None:
        """Stop an owned loop: cancel what still runs on it, then end its thread (at most
        `timeout` seconds: a handler that ignores cancellation is left on the daemon thread)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            if not self._owned or loop is None or thread is None:
                return
            self._loop = self._thread = None
        loop.call_soon_threadsafe(_cancel_all_and_stop, loop)
        thread.join(timeout)

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                ready = threading.Event()
                self._thread = threading.Thread(target=_serve, args=(self._loop, ready),
                                                name="sqla-queue-handlers", daemon=True)
                self._thread.start()
                ready.wait()
            return self._loop


def _serve(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    loop.call_soon(ready.set)
    try:
        loop.run_forever()
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


def _cancel_all_and_stop(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in tasks:
        task.cancel()
    if not tasks:
        loop.stop()
        return
    gathered = asyncio.gather(*tasks, return_exceptions=True)
    gathered.add_done_callback(lambda _: loop.stop())


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
