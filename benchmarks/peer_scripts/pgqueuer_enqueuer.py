"""pgqueuer's side of the wake-up latency runs (pgqueuer's own interpreter), DSN in ``$PGDSN``:
connects, prints ``ready``, then for each line ``<i>`` on stdin enqueues ``noop`` with payload
``{"i": i}`` and prints ``<i> <before the call> <after it returned>`` (epoch seconds)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import asyncpg
from pgqueuer.db import AsyncpgDriver
from pgqueuer.queries import Queries


async def main() -> None:
    connection = await asyncpg.connect(os.environ["PGDSN"])
    queries = Queries(AsyncpgDriver(connection))
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        i = int(line)
        before = time.time()
        await queries.enqueue("noop", json.dumps({"i": i}).encode(), 0)
        print(f"{i} {before} {time.time()}", flush=True)
    await connection.close()


if __name__ == "__main__":
    asyncio.run(main())
