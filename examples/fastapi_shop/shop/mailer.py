"""A stand-in for the mail provider's asyncio client library.

A real client sends the receipt with an HTTP request and passes the idempotency key along, so
that the provider sends one mail for a job delivered twice.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)


async def send_receipt(email: str, order_id: int, *, idempotency_key: str) -> None:
    """Send the receipt for `order_id` to `email`."""
    await asyncio.sleep(0.05)  # the HTTP round trip: the event loop runs other jobs meanwhile
    log.info("sent the receipt for order %s", order_id)
