"""The shop's HTTP API: place an order, look at it. Run with ``uvicorn shop.app:app``.

``SHOP_WORKER=lifespan`` (the default) runs a queue worker in the server's event loop for as
long as the server runs; ``SHOP_WORKER=off`` leaves the jobs to a separate worker,
``sqla-queue --app shop.jobs:queue worker``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from contextlib import asynccontextmanager, suppress
from decimal import Decimal
from typing import Annotated

from fastapi import FastAPI, HTTPException, Path
from pydantic import BaseModel, Field

from .db import Session, engine
from .jobs import queue, send_receipt
from .models import Order

WORKER = os.environ.get("SHOP_WORKER", "lifespan")
if WORKER not in ("lifespan", "off"):
    raise RuntimeError(f"SHOP_WORKER must be lifespan or off, not {WORKER!r}")

# uvicorn logs its own records; this shows the shop's and the queue's (one line per job).
logging.basicConfig(level=logging.INFO, format="%(levelname)-9s %(name)s: %(message)s")


@asynccontextmanager
async def lifespan(app: FastAPI):
    """With SHOP_WORKER=lifespan, a worker runs as a task in the server's event loop. At
    shutdown, cancelling it gives running jobs the grace period and releases the rest."""
    worker = None
    if WORKER == "lifespan":
        worker = asyncio.create_task(queue.worker(concurrency=20).run_async())
    try:
        yield
    finally:
        if worker is not None:
            worker.cancel()
            with suppress(asyncio.CancelledError):
                await worker
        await engine.dispose()


app = FastAPI(title="fastapi_shop", lifespan=lifespan)


class NewOrder(BaseModel):
    email: str = Field(max_length=254, pattern=r"^[^@\s]+@[^@\s]+$")
    total: Decimal = Field(gt=0, lt=100_000_000, decimal_places=2)


@app.post("/orders", status_code=201)
async def place_order(new: NewOrder, fail_after_enqueue: bool = False) -> dict:
    """Write the order and its job in one transaction: both exist, or neither does.
    ``?fail_after_enqueue=true`` makes the request fail after the enqueue, to show that."""
    async with Session.begin() as session:
        order = Order(email=new.email, total=new.total)
        session.add(order)
        await session.flush()  # assigns order.id
        await queue.enqueue_async(send_receipt, {"order_id": order.id}, session=session)
        if fail_after_enqueue:
            raise HTTPException(500, "failed after the enqueue, as asked: nothing was written")
    return order.as_json()


@app.get("/orders/{order_id}")
async def show_order(order_id: Annotated[int, Path(ge=1, lt=2**31)]) -> dict:
    async with Session() as session:
        order = await session.get(Order, order_id)
    if order is None:
        raise HTTPException(404, f"no order {order_id}")
    return order.as_json()
