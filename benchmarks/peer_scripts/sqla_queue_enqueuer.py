"""sqla_queue's side of the wake-up latency runs, the SQLAlchemy URL in ``$SQLA_QUEUE_BENCH_URL``:
connects, prints ``ready``, then for each line ``<i>`` on stdin enqueues ``noop`` with payload
``{"i": i}`` and prints ``<i> <before the call> <after it returned>`` (epoch seconds)."""

from __future__ import annotations

import os
import sys
import time

import sqla_queue as sq


def main() -> None:
    queue = sq.Queue(os.environ["SQLA_QUEUE_BENCH_URL"], load_entrypoints=False)

    @queue.task(name="noop", queue="bench")
    def noop(payload, ctx):
        return None

    queue.engine.connect().close()
    print("ready", flush=True)
    for line in sys.stdin:
        i = int(line)
        before = time.time()
        queue.enqueue("noop", {"i": i})
        print(f"{i} {before} {time.time()}", flush=True)
    queue.engine.dispose()


if __name__ == "__main__":
    main()
