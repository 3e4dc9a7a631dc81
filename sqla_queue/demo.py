"""A two-minute tour on the embedded PostgreSQL 18: ``python -m sqla_queue.demo``.

It starts (or reuses) a server in ``./.sqla_queue/demo-pg``, creates a new database there with
the queue's schema (the packaged Alembic revisions; dropped at the end), writes an order and its
receipt job in one transaction, then claims and completes it, shows a retry, a lost claim and a
deduplicated enqueue, and prints the queue's health. Pass ``--database-url`` (or set SQLA_QUEUE_DATABASE_URL) to use your own server.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from sqlalchemy import Integer, String, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import sqla_queue as sq
from sqla_queue import migrations
from sqla_queue.db.engine import DATABASE_URL_ENV
from sqla_queue.testing import migrated_database, start_embedded_server


class DemoBase(DeclarativeBase):
    pass


class Order(DemoBase):
    __tablename__ = "demo_orders"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    email: Mapped[str] = mapped_column(String(200))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=os.environ.get(DATABASE_URL_ENV))
    parser.add_argument("--data-dir", default=".sqla_queue/demo-pg")
    args = parser.parse_args(argv)
    if args.database_url:
        run(args.database_url)
        return
    # Our own embedded server: a new migrated database per run, dropped at the end.
    with migrated_database(server=start_embedded_server(Path(args.data_dir))) as url:
        run(url)


def run(url: str) -> None:
    engine = create_engine(url)
    with engine.connect() as conn:  # the queue's revisions commit on their own
        migrations.upgrade(conn)
    with engine.begin() as conn:
        DemoBase.metadata.create_all(conn)
    queue = sq.Queue(engine, load_entrypoints=False, blocked_plugins=["sqla_queue.logging"])
    try:
        tour(queue, engine)
    finally:
        engine.dispose()


def tour(queue: sq.Queue, engine) -> None:
    @queue.task(queue="emails", max_attempts=3)
    def send_receipt(payload: dict, ctx: sq.JobContext) -> None:
        print(f"  handler: receipt for order {payload['order_id']} "
              f"(attempt {ctx.attempt}/{ctx.max_attempts}, idempotency key {ctx.idempotency_key})")

    print("1. One transaction writes the order and enqueues its receipt:")
    with Session(engine) as session, session.begin():
        order = Order(email="ada@example.com")
        session.add(order)
        session.flush()
        order_id = order.id
        job_id = queue.enqueue(send_receipt, {"order_id": order_id}, session=session,
                               idempotency_key=f"receipt-{order_id}")
    print(f"  order {order_id} committed with job {job_id}")

    print("2. The same key while the job is pending returns the same job:")
    again = queue.enqueue(send_receipt, {"order_id": order_id}, idempotency_key=f"receipt-{order_id}")
    print(f"  enqueue again -> job {again} (deduplicated: {again == job_id})")

    print("3. A worker claims it (committed at once), works outside the transaction, completes:")
    [job] = queue.claim("emails", worker_id="demo-worker")
    queue.get_task(job.task).handler(job.payload, job.context())
    print(f"  complete -> {queue.complete(job.id, job.claim_token)}; "
          f"status now {queue.get_job(job.id).status.value}")

    print("4. A failing attempt is retried later; a stale token is reported as a lost claim:")
    flaky = queue.enqueue(send_receipt, {"order_id": order_id})
    [claimed] = queue.claim("emails", worker_id="demo-worker")
    outcome = queue.retry(claimed.id, claimed.claim_token, error=TimeoutError("partner API timed out"),
                          delay=30)
    print(f"  retry -> {outcome.status.value}, due at {outcome.run_at:%H:%M:%S} (database time)")
    print(f"  complete with the old token -> {queue.complete(flaky, claimed.claim_token)} (lost claim)")

    print("5. Queue health:")
    for health in queue.stats():
        print(f"  {health.queue}: pending={health.pending} (eligible {health.eligible}, "
              f"scheduled {health.scheduled}) running={health.running} "
              f"completed={health.completed} failed={health.failed}")


if __name__ == "__main__":
    main()
