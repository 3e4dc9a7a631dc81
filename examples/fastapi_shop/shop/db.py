"""The shop's one async engine and session factory; the queue shares the engine (shop/jobs.py)."""

from __future__ import annotations

import os

from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

try:
    DATABASE_URL = os.environ["DATABASE_URL"]
except KeyError:
    raise RuntimeError(
        "set DATABASE_URL to the shop's PostgreSQL database, e.g. postgresql+psycopg_async://shop@localhost/shop"
    ) from None


def async_url(url: str) -> URL:
    """The URL with psycopg 3's asyncio driver: ``postgresql://`` and ``postgresql+psycopg://``
    name the same database, and SQLAlchemy would read the first as psycopg2."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgresql+psycopg"):
        parsed = parsed.set(drivername="postgresql+psycopg_async")
    return parsed


engine = create_async_engine(async_url(DATABASE_URL))
Session = async_sessionmaker(engine, expire_on_commit=False)
