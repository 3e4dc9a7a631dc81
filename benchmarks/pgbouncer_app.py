"""The benchmark's app for ``sqla-queue --app benchmarks.pgbouncer_app:queue worker``: the
``noop`` task of `bench_app` on the queue at ``SQLA_QUEUE_DATABASE_URL`` (direct, or through
PgBouncer with ``?prepare_threshold=none``). Used by `benchmarks.pgbouncer`."""

from __future__ import annotations

import os

from .bench_app import make_queue

queue = make_queue(os.environ["SQLA_QUEUE_DATABASE_URL"])
