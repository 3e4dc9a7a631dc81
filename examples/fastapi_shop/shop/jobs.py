"""The shop's queue and its one handler, an ``async def``.

The queue is built from the shop's AsyncEngine, so ``await queue.enqueue_async(...,
session=session)`` writes the job in the same transaction as the order. The handler runs in the
web server's event loop (``SHOP_WORKER=lifespan``, shop/app.py) or in a separate worker:
``sqla-queue --app shop.jobs:queue worker``.
"""

from __future__ import annotations

from sqlalchemy import func, update

import sqla_queue as sq

from . import mailer
from .db import Session, engine
from .models import Order

queue = sq.Queue(engine)


@queue.task(timeout=30)
async def send_receipt(payload: dict, ctx: sq.JobContext) -> None:
    """Send the receipt and mark the order. A second delivery of this job finds the order
    marked, or reaches the mailer with the same idempotency key."""
    async with Session() as session:
        order = await session.get(Order, payload["order_id"])
    if order is None or order.receipt_sent_at is not None:
        return
    await mailer.send_receipt(order.email, order.id, idempotency_key=ctx.idempotency_key)
    async with Session.begin() as session:
        await session.execute(update(Order).where(Order.id == order.id).values(receipt_sent_at=func.now()))
