"""``python -m benchmarks.dashboard``: how fast the dashboard answers on a large table.

Fills the job table with 1,000,000 jobs by default (four queues; completed and failed history
spread over two days, a backlog of 10,000 pending jobs (``--pending``), a tenth of them scheduled
for later, a thousand running, and a day of per-minute samples), then times, over HTTP (uvicorn on a loopback port, one
keep-alive connection, as a browser would):

* the overview page (``GET /``), and each Queue call behind it (`stats`, `history`);
* the jobs page, first and a deep keyset page, filtered by status; a job's page; workers.

Prints the median and range over ``--repeat`` runs. The target: the overview under 100 ms.
Its own embedded PostgreSQL 18 unless ``--database-url`` names a server.
"""

from __future__ import annotations

import argparse
import http.client
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.table import Table
from sqlalchemy import create_engine, text

import sqla_queue as sq
from sqla_queue.dashboard import create_app

from .server import benchmark_database
from .stats import summary

TARGET_OVERVIEW_MS = 100.0
QUEUES = ("default", "emails", "images", "reports")

# Finished history over two days (80% completed, 20% failed), round-robin over the queues.
FILL_FINISHED = text("""
INSERT INTO sqla_queue_jobs (queue_name, task, payload, status, run_at, created_at, attempts, locked_at,
                             locked_by, claim_token, completed_at, failed_at, last_error)
SELECT (CAST(:queues AS text[]))[1 + g % cardinality(CAST(:queues AS text[]))], 'task_' || (g % 7), jsonb_build_object('i', g),
       CASE WHEN g % 5 = 0 THEN 'failed' ELSE 'completed' END,
       t, t, 1, t, 'bench-worker-' || (g % 8), md5(g::text),
       CASE WHEN g % 5 = 0 THEN NULL ELSE t + interval '80 milliseconds' END,
       CASE WHEN g % 5 = 0 THEN t + interval '80 milliseconds' END,
       CASE WHEN g % 5 = 0 THEN 'RuntimeError: upstream said no' END
FROM generate_series(1, :n) AS g,
     LATERAL (SELECT now() - interval '2 days' + (g * interval '2 days') / :n AS t) AS at
""")
# The backlog: pending jobs due over the last hour, a tenth of them scheduled for the next one.
FILL_PENDING = text("""
INSERT INTO sqla_queue_jobs (queue_name, task, payload, run_at)
SELECT (CAST(:queues AS text[]))[1 + g % cardinality(CAST(:queues AS text[]))], 'task_' || (g % 7), jsonb_build_object('i', g),
       CASE WHEN g % 10 = 0 THEN now() + interval '1 hour' * random()
            ELSE now() - interval '1 hour' + (g * interval '1 hour') / :n END
FROM generate_series(1, :n) AS g
""")
FILL_RUNNING = text("""
INSERT INTO sqla_queue_jobs (queue_name, task, payload, status, run_at, attempts, locked_at, locked_by, claim_token)
SELECT (CAST(:queues AS text[]))[1 + g % cardinality(CAST(:queues AS text[]))], 'task_1', jsonb_build_object('i', g), 'running',
       now(), 1, now(), 'bench-worker-' || (g % 8), md5(g::text)
FROM generate_series(1, :n) AS g
""")
# A day of samples for every queue, as workers would have written them.
FILL_SAMPLES = text("""
INSERT INTO sqla_queue_jobs_samples (bucket, queue_name, pending, eligible, completed, failed)
SELECT date_trunc('minute', now()) - make_interval(mins => m), q, 100 + m % 50, 90 + m % 40, 40, 2
FROM generate_series(1, 1440) AS m, unnest(CAST(:queues AS text[])) AS q
ON CONFLICT DO NOTHING
""")


def fill(url: str, jobs: int, pending: int) -> None:
    """`jobs` rows: `pending` of them pending, 0.1% running, the rest finished; then VACUUM
    ANALYZE."""
    engine = create_engine(url)
    queues = list(QUEUES)
    running = jobs // 1000
    with engine.begin() as conn:
        conn.execute(FILL_FINISHED, {"queues": queues, "n": jobs - pending - running})
        conn.execute(FILL_PENDING, {"queues": queues, "n": pending})
        conn.execute(FILL_RUNNING, {"queues": queues, "n": running})
        conn.execute(FILL_SAMPLES, {"queues": queues})
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM (ANALYZE) sqla_queue_jobs"))
        conn.execute(text("VACUUM (ANALYZE) sqla_queue_jobs_samples"))
    engine.dispose()


def timed(call: Callable[[], object], repeat: int) -> dict:
    call()  # warm: connections, compiled statements, templates
    values = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        values.append((time.perf_counter() - start) * 1000)
    return summary(values)


@contextmanager
def served(app) -> Iterator[http.client.HTTPConnection]:
    """`app` under uvicorn on a free loopback port, and one keep-alive connection to it."""
    import uvicorn

    sock = socket.socket()
    # Accepted connections inherit it: without it a response written in two parts waits for
    # the client's delayed ACK (~40 ms on Linux), which is the kernel's figure, not the app's.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", timeout_keep_alive=600))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    connection = http.client.HTTPConnection("127.0.0.1", sock.getsockname()[1], timeout=60)
    try:
        yield connection
    finally:
        connection.close()
        server.should_exit = True
        thread.join(10)
        sock.close()


def measure(url: str, repeat: int) -> dict[str, dict]:
    queue = sq.Queue(url, load_entrypoints=False)
    deep = queue.list_jobs(status="failed", limit=1000).jobs[-1].id  # the page after the first 1,000
    some_job = queue.list_jobs(limit=1).jobs[0].id
    with served(create_app(queue, record_samples=False)) as connection:

        def page(path: str) -> Callable[[], object]:
            def get() -> object:
                connection.request("GET", path)
                response = connection.getresponse()
                body = response.read()
                assert response.status == 200, (path, response.status)
                return body
            return get

        figures = {
            "GET /static/dashboard.css (HTTP alone)": timed(page("/static/dashboard.css"), repeat),
            "GET / (overview, last hour)": timed(page("/"), repeat),
            "GET /?range=24h": timed(page("/?range=24h"), repeat),
            "  Queue.stats()": timed(queue.stats, repeat),
            "  Queue.history(since=1h)": timed(lambda: queue.history(), repeat),
            "GET /jobs?status=failed": timed(page("/jobs?status=failed"), repeat),
            "GET /jobs?status=failed (page after 1,000)": timed(page(f"/jobs?status=failed&before_id={deep}"), repeat),
            "GET /jobs/<id>": timed(page(f"/jobs/{some_job}"), repeat),
            "GET /workers": timed(page("/workers"), repeat),
        }
    queue.engine.dispose()
    return figures


def render(figures: dict[str, dict], jobs: int, pending: int) -> Table:
    table = Table(title=f"dashboard on {jobs:,} jobs, {pending:,} pending (ms; median, min-max)",
                  title_justify="left")
    for column in ("what", "median", "min", "max", "n"):
        table.add_column(column, justify="left" if column == "what" else "right")
    for what, figure in figures.items():
        table.add_row(what, f"{figure['median']:.1f}", f"{figure['min']:.1f}", f"{figure['max']:.1f}", str(figure["n"]))
    overview = figures["GET / (overview, last hour)"]["median"]
    verdict = "met" if overview < TARGET_OVERVIEW_MS else "MISSED"
    table.caption = f"target: overview under {TARGET_OVERVIEW_MS:.0f} ms: {verdict} ({overview:.1f} ms)"
    return table


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dashboard", description=__doc__)
    parser.add_argument("--jobs", type=int, default=1_000_000, help="rows in the job table (default 1,000,000)")
    parser.add_argument("--pending", type=int, default=10_000,
                        help="of those, pending (the backlog every stats call counts; default 10,000)")
    parser.add_argument("--repeat", type=int, default=20, help="timed requests per figure (default 20)")
    parser.add_argument("--database-url", help="use this server instead of an embedded PostgreSQL 18")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(width=120)
    with benchmark_database(args.database_url) as db:
        started = time.perf_counter()
        fill(db.sqlalchemy_url, args.jobs, args.pending)
        console.print(f"filled {args.jobs:,} jobs ({args.pending:,} pending) in {time.perf_counter() - started:.0f} s")
        console.print(render(measure(db.sqlalchemy_url, args.repeat), args.jobs, args.pending))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
