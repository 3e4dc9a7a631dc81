"""The shop's queue and its handlers.

The queue uses the shop's own engine, so `queue.enqueue(..., session=session)` writes the job in
the same transaction as the order. Run the handlers with
``sqla-queue --app shop.jobs:queue worker``.
"""

from __future__ import annotations

import logging

from sqlalchemy import func

import sqla_queue as sq

from . import partner
from .db import Session, engine
from .models import Order

log = logging.getLogger(__name__)

queue = sq.Queue(engine)


@queue.task(queue="emails")
def send_receipt(payload: dict, ctx: sq.JobContext) -> None:
    """Mail the receipt once: a second delivery of this job finds the order already mailed."""
    with Session.begin() as session:
        order = session.get(Order, payload["order_id"], with_for_update=True)
        if order is None or order.receipt_mailed_at is not None:
            return
        log.info("mailing the receipt for order %s", order.id)  # a real shop calls its mailer here
        order.receipt_mailed_at = func.now()


@queue.task(max_attempts=3)
def charge_card(payload: dict, ctx: sq.JobContext) -> None:
    """Charge the order's total. A decline fails the job for good; other partner errors retry."""
    with Session() as session:
        order = session.get(Order, payload["order_id"])
        if order is None or order.paid_at is not None:
            return
        total = order.total
    try:
        partner.charge(total, idempotency_key=ctx.idempotency_key)
    except partner.CardDeclined as exc:
        raise sq.NonRetryableError("the card was declined") from exc
    with Session.begin() as session:
        session.get(Order, payload["order_id"]).paid_at = func.now()
