"""A small application: placing an order enqueues a receipt; the receipt handler marks the order
mailed in the job's own transaction. Used by test_shop.py, run as a project of its own."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Boolean, Integer, String, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import sqla_queue as sq


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    email: Mapped[str] = mapped_column(String)
    mailed: Mapped[bool] = mapped_column(Boolean, default=False)
    reminders: Mapped[int] = mapped_column(Integer, default=0)


class Shop:
    def __init__(self, database_url: str, *, testing: str | None = None) -> None:
        self.engine = create_engine(database_url)
        Base.metadata.create_all(self.engine)
        self.queue = sq.Queue(self.engine, load_entrypoints=False, testing=testing)
        self.outbox: list[str] = []
        queue = self.queue

        @queue.task(queue="mail", retry_delay=timedelta(minutes=5))
        def send_receipt(payload, ctx):
            if "@" not in payload["email"]:
                raise ValueError(f"cannot mail {payload['email']!r}")
            with ctx.transaction() as session:
                session.get(Order, payload["order_id"]).mailed = True
            self.outbox.append(payload["email"])

        @queue.task
        def remind(payload, ctx):
            with ctx.transaction() as session:
                order = session.get(Order, payload["order_id"])
                order.reminders += 1
                if order.reminders < payload["times"]:
                    queue.enqueue("remind", payload, delay=timedelta(days=1))

        @queue.task
        async def audit(payload, ctx):
            return {"audited": payload["order_id"]}

    def place_order(self, email: str) -> int:
        with Session(self.engine) as session:
            order = Order(email=email)
            session.add(order)
            session.flush()
            self.queue.enqueue("send_receipt", {"order_id": order.id, "email": email}, session=session)
            self.queue.enqueue("remind", {"order_id": order.id, "times": 3}, delay=timedelta(days=1),
                               session=session)
            session.commit()
            return order.id

    def order(self, order_id: int) -> Order:
        with Session(self.engine) as session:
            return session.scalars(select(Order).where(Order.id == order_id)).one()
