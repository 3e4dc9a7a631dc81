"""The shop's one table. ``python -m shop.tables`` creates it."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import DateTime, Numeric, String, func
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(254))
    total: Mapped[Decimal] = mapped_column(Numeric(10, 2))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    receipt_sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)

    def as_json(self) -> dict:
        return {
            "id": self.id,
            "email": self.email,
            "total": f"{self.total:.2f}",  # 19.9 as posted, 19.90 as stored
            "receipt_sent": self.receipt_sent_at is not None,
        }
