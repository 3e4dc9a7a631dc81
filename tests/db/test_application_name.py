"""Connections say whose they are in ``pg_stat_activity``: ``sqla-queue host:pid`` for a queue
built from a URL, ``sqla-queue worker host:pid`` for a worker's; a name the user gave (the URL's
``?application_name=``, ``connect_args``) is kept."""

from __future__ import annotations

import os
import socket
import threading

from sqlalchemy import create_engine, text

import sqla_queue as sq

HOST_PID = f"{socket.gethostname()}:{os.getpid()}"


def _with_query(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{query}"


def names_seen_by_a_running_handler(queue: sq.Queue, observer) -> list[str]:
    """The application names of this database's sessions, read while a worker runs a job."""
    seen: list[str] = []
    done = threading.Event()

    @queue.task(name="look")
    def look(payload, ctx):
        with observer.connect() as conn:
            seen.extend(conn.execute(text(
                "SELECT application_name FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()")).scalars())
        done.set()

    queue.enqueue("look", {})
    queue.worker(concurrency=1, poll_interval=0.05).run(until_empty=True)
    assert done.is_set()
    return seen


def test_a_url_queue_and_its_worker_name_their_connections(database_url, clean_jobs, engine):
    queue = sq.Queue(database_url, load_entrypoints=False)
    try:
        with queue.engine.connect() as conn:
            assert conn.execute(text("SELECT current_setting('application_name')")).scalar_one() == \
                f"sqla-queue {HOST_PID}"
        names = names_seen_by_a_running_handler(queue, engine)
    finally:
        queue.engine.dispose()
    assert f"sqla-queue worker {HOST_PID}" in names


def test_a_worker_on_an_application_engine_names_its_connections(database_url, clean_jobs, engine):
    app_engine = create_engine(database_url)
    queue = sq.Queue(app_engine, load_entrypoints=False)
    try:
        names = names_seen_by_a_running_handler(queue, engine)
    finally:
        app_engine.dispose()
    assert f"sqla-queue worker {HOST_PID}" in names


def test_a_name_in_the_url_is_kept_by_the_queue_and_its_worker(own_database):
    """On a database of its own: other tests' queues in this process keep sessions on the
    shared one, under their own names."""
    database_url, engine = own_database
    queue = sq.Queue(_with_query(database_url, "application_name=billing"), load_entrypoints=False)
    try:
        with queue.engine.connect() as conn:
            assert conn.execute(text("SELECT current_setting('application_name')")).scalar_one() == "billing"
        names = names_seen_by_a_running_handler(queue, engine)
    finally:
        queue.engine.dispose()
    assert "billing" in names and not any(name.startswith("sqla-queue") for name in names)


def test_a_name_in_connect_args_is_kept_by_the_worker(own_database):
    database_url, engine = own_database
    app_engine = create_engine(database_url, connect_args={"application_name": "shop-web"})
    queue = sq.Queue(app_engine, load_entrypoints=False)
    try:
        names = names_seen_by_a_running_handler(queue, engine)
    finally:
        app_engine.dispose()
    assert "shop-web" in names and not any(name.startswith("sqla-queue worker") for name in names)
