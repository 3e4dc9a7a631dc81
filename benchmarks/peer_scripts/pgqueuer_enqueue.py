"""pgqueuer enqueue from a fresh process (run by pgqueuer's own interpreter):
``python pgqueuer_enqueue.py JOBS BATCH``, DSN in ``$PGDSN``.

Enqueues JOBS no-op jobs in calls of BATCH (``Queries.enqueue`` with lists: one statement per
call), payload ``{"i": n}``; prints one JSON line: ``seconds`` from just before connecting to
the last call's return (a fresh process pays its first connection, as a script would).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import asyncpg
from pgqueuer.db import AsyncpgDriver
from pgqueuer.queries import Queries


async def main(jobs: int, batch: int) -> dict:
    payloads = [json.dumps({"i": n}).encode() for n in range(jobs)]
    t0 = time.monotonic()
    connection = await asyncpg.connect(os.environ["PGDSN"])
    queries = Queries(AsyncpgDriver(connection))
    first = None
    for start in range(0, jobs, batch):
        chunk = payloads[start:start + batch]
        if batch == 1:
            await queries.enqueue("noop", chunk[0], 0)
        else:
            await queries.enqueue(["noop"] * len(chunk), chunk, [0] * len(chunk))
        if first is None:
            first = time.monotonic() - t0
    seconds = time.monotonic() - t0
    await connection.close()
    return {"jobs": jobs, "batch": batch, "seconds": seconds, "first_call_seconds": first}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))))
