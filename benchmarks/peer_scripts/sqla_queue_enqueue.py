"""sqla_queue enqueue from a fresh process: ``python sqla_queue_enqueue.py JOBS BATCH``, the
SQLAlchemy URL in ``$SQLA_QUEUE_BENCH_URL``.

The same measurement as the peers' enqueue scripts: JOBS no-op jobs (``enqueue`` one at a time
when BATCH is 1, else ``enqueue_many`` in calls of BATCH), payload ``{"i": n}``; prints one JSON
line, ``seconds`` from just before the Queue is built to the last call's return. Like the
peers' scripts (asyncpg, graphile-worker), the driver is imported before the clock starts: SQLAlchemy
would otherwise import psycopg inside ``Queue(url)``.
"""

from __future__ import annotations

import json
import os
import sys
import time

import psycopg  # noqa: F401  the driver, imported before the clock as the peers' scripts import theirs
import sqla_queue as sq


def main(jobs: int, batch: int) -> dict:
    payloads = [{"i": n} for n in range(jobs)]
    t0 = time.monotonic()
    queue = sq.Queue(os.environ["SQLA_QUEUE_BENCH_URL"], load_entrypoints=False)

    @queue.task(name="noop", queue="bench")
    def noop(payload, ctx):
        return None

    first = None
    for start in range(0, jobs, batch):
        chunk = payloads[start:start + batch]
        if batch == 1:
            queue.enqueue("noop", chunk[0])
        else:
            queue.enqueue_many([{"task": "noop", "payload": p} for p in chunk])
        if first is None:
            first = time.monotonic() - t0
    seconds = time.monotonic() - t0
    queue.engine.dispose()
    return {"jobs": jobs, "batch": batch, "seconds": seconds, "first_call_seconds": first}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), int(sys.argv[2]))))
