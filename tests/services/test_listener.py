"""The listener (`sqla_queue.services.listener`), one session at a time against the database: it wakes
the worker for its own queues only, ends cleanly when asked, and reports a broken connection as
the session's result instead of raising."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text

import sqla_queue as sq
from sqla_queue.services.listener import Listener, ListenerConfig, ListenResult
from sqla_queue.errors import ConfigurationError


@pytest.fixture
def listened(engine, clean_jobs):
    """A queue with a task on each of two queues, and a listener for queue "mine" only."""
    queue = sq.Queue(engine, load_entrypoints=False)
    queue.task(name="mine", queue="mine")(lambda payload, ctx: None)
    queue.task(name="theirs", queue="theirs")(lambda payload, ctx: None)
    wake, done = threading.Event(), threading.Event()
    listener = Listener(queue.core, ListenerConfig(queues=("mine",), call_timeout=5.0, probe_every=0.2), wake, done)
    return queue, listener, wake, done


class Session:
    """`run_once` on a thread of its own; `result` once it ended."""

    def __init__(self, listener: Listener) -> None:
        self.result: ListenResult | None = None
        self.thread = threading.Thread(target=self._run, args=(listener,), daemon=True)
        self.thread.start()
        assert listener.connected.wait(10), "the listener never connected"

    def _run(self, listener: Listener) -> None:
        self.result = listener.run_once()

    def ended(self) -> ListenResult:
        self.thread.join(10)
        assert self.result is not None, "the session did not end"
        return self.result


def test_a_session_wakes_the_worker_for_its_own_queues_and_ends_when_asked(listened):
    queue, listener, wake, done = listened
    session = Session(listener)
    wake.clear()  # set on connect: what was enqueued before LISTEN is looked for at once

    queue.enqueue("theirs", {})
    queue.enqueue("mine", {})
    assert wake.wait(10)
    done.set()

    result = session.ended()
    assert result == ListenResult(wakeups=1, error=None)
    assert not listener.connected.is_set()


def test_interrupt_ends_a_long_wait_for_notifications_at_once(listened):
    queue, _, wake, done = listened
    # A wait of a minute: without `interrupt` the session would outlast `ended`'s 10 s.
    listener = Listener(queue.core, ListenerConfig(queues=("mine",), call_timeout=5.0, wait=60.0), wake, done)
    session = Session(listener)

    done.set()
    listener.interrupt()

    assert session.ended() == ListenResult(wakeups=0, error=None)
    listener.close()
    listener.interrupt()  # after close: nothing to wake, and no error


def test_a_notification_during_a_long_wait_is_passed_on_at_once(listened):
    queue, _, wake, done = listened
    listener = Listener(queue.core, ListenerConfig(queues=("mine",), call_timeout=5.0, wait=60.0), wake, done)
    session = Session(listener)
    wake.clear()

    queue.enqueue("mine", {})

    assert wake.wait(10)  # the wait ends when the server sends the notification, not after 60 s
    done.set()
    listener.interrupt()
    assert session.ended().wakeups == 1


def test_a_terminated_connection_ends_the_session_with_its_error(listened, engine):
    queue, listener, wake, done = listened
    session = Session(listener)
    with engine.begin() as conn:
        terminated = conn.execute(text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query LIKE 'LISTEN %'"
        )).scalar_one()
    assert terminated == 1

    result = session.ended()
    assert result.error is not None
    assert not listener.connected.is_set()
    assert not done.is_set()


@pytest.mark.parametrize(("options", "message"), [
    ({"queues": ()}, "queues must be a non-empty tuple"),
    ({"queues": "mine"}, "queues must be a non-empty tuple"),
    ({"queues": ("mine", " ")}, "queues[1]"),
    ({"call_timeout": 0}, "call_timeout must be a positive number of seconds"),
    ({"probe_every": -1}, "probe_every must be a positive number of seconds"),
    ({"reconnect_max": float("nan")}, "reconnect_max must be a positive number of seconds"),
    ({"wait": 0}, "wait must be a positive number of seconds"),
])
def test_bad_configuration_is_refused_naming_the_field(options, message):
    with pytest.raises(ConfigurationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        ListenerConfig(**{"queues": ("mine",), "call_timeout": 5.0, **options})
