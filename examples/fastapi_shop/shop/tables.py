"""Create the shop's own table: ``python -m shop.tables``.

The queue's table comes from ``sqla-queue --app shop.jobs:queue db upgrade``. A shop in
production keeps both in its Alembic history instead (docs/tutorial.md shows how).
"""

from __future__ import annotations

import asyncio

from .db import engine
from .models import Base


async def create_tables() -> None:
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    await engine.dispose()


if __name__ == "__main__":
    asyncio.run(create_tables())
    print("the shop's tables are ready")
