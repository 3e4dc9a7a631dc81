"""The benchmark's app for ``sqla-queue --app benchmarks.cpu_scaling_app:queue worker``: the
pre-filled ``noop`` jobs of queue ``bench`` run a handler that burns CPU in pure Python
(`benchmarks.cpu_scaling.burn`, ``BENCH_BURN_ITERATIONS`` iterations a job), on the queue at
``SQLA_QUEUE_DATABASE_URL``. Used by `benchmarks.cpu_scaling`."""

from __future__ import annotations

import os

import sqla_queue as sq

from .cpu_scaling import ITERATIONS_ENV, burn
from .raw_sql import QUEUE, TASK

queue = sq.Queue(os.environ["SQLA_QUEUE_DATABASE_URL"], load_entrypoints=False)
_iterations = int(os.environ.get(ITERATIONS_ENV, "100000"))


@queue.task(name=TASK, queue=QUEUE)
def burn_cpu(payload: dict, ctx: sq.JobContext) -> None:
    burn(_iterations)
