"""The shop's HTTP API: place an order, look at it. Run with ``flask --app shop.app run``."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from flask import Flask, abort, request
from werkzeug.exceptions import HTTPException

from .db import Session
from .jobs import charge_card, queue, send_receipt
from .models import Order

app = Flask(__name__)


@app.post("/orders")
def place_order():
    """Write the order and its two jobs in one transaction: all three exist, or none does."""
    email, total = _order_fields(request.get_json(silent=True))
    with Session.begin() as session:
        order = Order(email=email, total=total)
        session.add(order)
        session.flush()  # assigns order.id
        queue.enqueue(send_receipt, {"order_id": order.id}, session=session)
        queue.enqueue(charge_card, {"order_id": order.id}, session=session)
        body = order.as_json()
    return body, 201


@app.get("/orders/<int:order_id>")
def show_order(order_id: int):
    with Session() as session:
        order = session.get(Order, order_id)
        if order is None:
            abort(404, description=f"no order {order_id}")
        return order.as_json()


@app.errorhandler(HTTPException)
def json_error(exc: HTTPException):
    return {"error": exc.description}, exc.code


def _order_fields(data: object) -> tuple[str, Decimal]:
    """The order's email and total from a JSON body, or a 400 that says what is wrong."""
    if not isinstance(data, dict):
        abort(400, description='send a JSON object: {"email": "...", "total": "19.90"}')
    email = data.get("email")
    if not isinstance(email, str) or "@" not in email or len(email) > 254:
        abort(400, description="email must be an email address of at most 254 characters")
    try:
        total = Decimal(str(data.get("total")))
    except InvalidOperation:
        abort(400, description='total must be a decimal amount such as "19.90"')
    if not total.is_finite() or total <= 0 or total >= Decimal("1e8") or total != total.quantize(Decimal("0.01")):
        abort(400, description="total must be positive, below 100,000,000, with at most two decimals")
    return email, total
