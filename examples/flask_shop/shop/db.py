"""The shop's one engine and session factory; the queue shares them (shop/jobs.py)."""

from __future__ import annotations

import os

from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

try:
    DATABASE_URL = os.environ["DATABASE_URL"]
except KeyError:
    raise RuntimeError(
        "set DATABASE_URL to the shop's PostgreSQL database, e.g. postgresql+psycopg://shop@localhost/shop"
    ) from None

engine = create_engine(DATABASE_URL)
Session = sessionmaker(engine)
