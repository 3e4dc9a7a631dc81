"""The one way tests wait for what another thread or process does: poll for the state itself,
with an overall timeout that only a failing test ever reaches. Never a bare sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

WAIT = 120.0
"""Seconds before a wait gives up: generous, since a passing test stops waiting at once."""


def wait_until(predicate: Callable[[], Any], what: str = "the condition", *, timeout: float = WAIT,
               interval: float = 0.05) -> Any:
    """Poll `predicate` until it returns something truthy and return that; an AssertionError
    naming `what` after `timeout` seconds."""
    give_up = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() >= give_up:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)
    return value
