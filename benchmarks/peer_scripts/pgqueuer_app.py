"""The pgqueuer side of ``python -m benchmarks --peers``: run by pgqueuer's own interpreter (its
venv under the cache directory), never imported by the benchmark itself.

``pgq run pgqueuer_app:create_pgqueuer --mode drain --batch-size N``: the factory ``pgq run``
takes (an async context manager yielding a PgQueuer), one asyncpg connection as in pgqueuer's
quick start, and one no-op entrypoint named ``noop``. With ``$BENCH_STARTS_OUT`` set (the
wake-up latency runs) the entrypoint appends ``<payload i> <epoch seconds>`` when it starts.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import asynccontextmanager

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job


@asynccontextmanager
async def create_pgqueuer():
    connection = await asyncpg.connect(os.environ["PGDSN"])
    pgq = PgQueuer(AsyncpgDriver(connection))

    starts = os.environ.get("BENCH_STARTS_OUT")
    if starts:
        @pgq.entrypoint("noop")
        async def timed(job: Job) -> None:
            with open(starts, "a") as out:
                out.write(f"{json.loads(job.payload)['i']} {time.time()}\n")
    else:
        @pgq.entrypoint("noop")
        async def noop(job: Job) -> None:
            return None

    try:
        yield pgq
    finally:
        await connection.close()
