"""The pgqueuer side of ``python -m benchmarks --peers``: run by pgqueuer's own interpreter (its
venv under the cache directory), never imported by the benchmark itself.

``pgq run pgqueuer_app:create_pgqueuer --mode drain --batch-size N``: the factory ``pgq run``
takes (an async context manager yielding a PgQueuer), one asyncpg connection as in pgqueuer's
quick start, and one no-op entrypoint named ``noop``.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job


@asynccontextmanager
async def create_pgqueuer():
    connection = await asyncpg.connect(os.environ["PGDSN"])
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    try:
        yield pgq
    finally:
        await connection.close()
