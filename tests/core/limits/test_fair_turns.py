"""Fair turns (sql/enqueue.py `fair_turn`, sql/claim/fair.py): a queue that is only fair gets
each job's turn from its enqueue, and its claims take keys by turn without the limits lock."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text

import sqla_queue as sq

pytestmark = pytest.mark.usefixtures("clean_jobs")


def turns(engine, ids) -> list:
    with engine.connect() as conn:
        found = dict(conn.execute(text("SELECT id, fair_tag FROM sqla_queue_jobs")).all())
    return [found[job_id] for job_id in ids]


def keyed(key, n, **extra) -> list[dict]:
    return [{"task": "send_email", "payload": {"i": i}, "group_key": key, **extra} for i in range(n)]


def test_a_fair_queues_enqueue_gives_each_key_its_next_turns_and_other_queues_none(queue, engine):
    queue.set_limits("default", fair=True)
    a = queue.enqueue_many(keyed("a", 3))
    b = queue.enqueue_many([*keyed("b", 2), *keyed(None, 2)])
    one_more_a = queue.enqueue("send_email", {}, group_key="a")
    elsewhere = queue.enqueue("send_email", {}, queue="other", group_key="a")

    assert turns(engine, a) == [0, 1, 2]
    assert turns(engine, b) == [0, 1, 0, 1]  # a new key joins the turn served now; no key is one more key
    assert turns(engine, [one_more_a, elsewhere]) == [3, None]


def test_a_key_that_arrives_late_joins_the_turn_being_served(queue, engine):
    queue.set_limits("default", fair=True)
    a = queue.enqueue_many(keyed("a", 10))
    assert {job.id for job in queue.claim("default", worker_id="w", limit=4)} == set(a[:4])

    late = queue.enqueue("send_email", {}, group_key="late")
    assert turns(engine, [late]) == [4]
    assert {job.id for job in queue.claim("default", worker_id="w", limit=2)} == {a[4], late}


def test_a_keys_jobs_take_turns_in_enqueue_order_and_the_claim_order_decides_within_a_turn(queue):
    queue.set_limits("default", fair=True)
    a = queue.enqueue_many(keyed("a", 2))
    urgent_a = queue.enqueue("send_email", {}, group_key="a", priority=5)  # turn 2: behind a's own
    b = queue.enqueue("send_email", {}, group_key="b", priority=5)  # turn 0, beside a[0]

    assert [job.id for job in queue.claim("default", worker_id="w", limit=1)] == [b]
    assert [job.id for job in queue.claim("default", worker_id="w", limit=3)] == [*a, urgent_a]


def test_a_fair_claim_does_not_wait_for_the_limits_row(queue, engine):
    """A claim under a cap takes the queue's limits row lock; a queue that is only fair does not,
    so its claims run side by side. Here another transaction holds that row: the fair claim still
    returns at once (it would wait for the holder if it took the lock)."""
    queue.set_limits("default", fair=True)
    first, *ids = queue.enqueue_many(keyed("a", 3))
    assert [job.id for job in queue.claim("default", worker_id="w", limit=1)] == [first]  # limits read
    got: list = []
    with engine.connect() as holder:
        holder.execute(text("SELECT 1 FROM sqla_queue_jobs_limits WHERE queue_name = 'default' FOR UPDATE"))
        claimer = threading.Thread(target=lambda: got.extend(queue.claim("default", worker_id="w", limit=2)))
        claimer.start()
        claimer.join(timeout=10)
        blocked = claimer.is_alive()
        holder.rollback()
    claimer.join()
    assert not blocked and {job.id for job in got} == set(ids)


def test_making_a_queue_fair_gives_its_backlog_turns(queue, engine):
    a = queue.enqueue_many(keyed("a", 3))
    none = queue.enqueue("send_email", {})
    queue.set_limits("default", fair=True)
    assert turns(engine, [*a, none]) == [0, 1, 2, 0]


def test_jobs_without_a_turn_are_claimed_once_no_turn_is_due(queue, engine):
    """A row inserted by other means than the enqueue (here a plain INSERT) has no turn: it waits
    for the jobs that have one, and is never stranded."""
    queue.set_limits("default", fair=True)
    with engine.begin() as conn:
        outsider = conn.execute(text(
            "INSERT INTO sqla_queue_jobs (queue_name, task, payload, group_key)"
            " VALUES ('default', 'send_email', '{}', 'x') RETURNING id")).scalar_one()
    with_turn = queue.enqueue_many(keyed("a", 2))

    assert [job.id for job in queue.claim("default", worker_id="w", limit=1)] == with_turn[:1]
    assert {job.id for job in queue.claim("default", worker_id="w", limit=5)} == {with_turn[1], outsider}


def test_a_fair_queue_with_a_cap_keeps_the_serialized_claim(queue):
    queue.set_limits("default", fair=True, group_concurrency=1)
    a = queue.enqueue_many(keyed("a", 3))
    b = queue.enqueue_many(keyed("b", 3))
    assert {job.id for job in queue.claim("default", worker_id="w", limit=10)} == {a[0], b[0]}


RECORD_INSERT_STATEMENTS = """
CREATE TABLE insert_statements (n serial, query text);
CREATE FUNCTION record_insert_statement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO insert_statements (query) VALUES (current_query());
  RETURN NULL;
END $$;
CREATE TRIGGER record_insert_statement BEFORE INSERT ON sqla_queue_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION record_insert_statement();
"""


@pytest.mark.parametrize("built_from", ["url", "engine"])
def test_a_single_enqueue_reads_turns_only_for_a_queue_it_found_fair(own_database, built_from):
    """A statement-level trigger logs every INSERT statement, whether it wrote a row or not. A
    single enqueue sends the INSERT without turns; into a fair queue that one writes nothing and
    the INSERT with turns follows, and once a queue was found fair its jobs go straight there."""
    url, engine = own_database
    with engine.begin() as conn:
        conn.exec_driver_sql(RECORD_INSERT_STATEMENTS)
    queue = sq.Queue(url if built_from == "url" else engine, load_entrypoints=False)
    queue.task(lambda payload, ctx: None, name="send_email")

    def statements_of(call) -> list[bool]:
        """Whether each INSERT statement `call` sent reads turns (the job table as ``turns``)."""
        with engine.connect() as conn:
            before = conn.execute(text("SELECT coalesce(max(n), 0) FROM insert_statements")).scalar_one()
        job_id = call()
        with engine.connect() as conn:
            queries = conn.execute(text("SELECT query FROM insert_statements WHERE n > :n ORDER BY n"),
                                   {"n": before}).scalars().all()
        statements_of.ids.append(job_id)
        return ["AS turns" in query for query in queries]

    statements_of.ids = []
    enqueue = lambda: queue.enqueue("send_email", {}, group_key="a")  # noqa: E731
    assert statements_of(enqueue) == [False]
    queue.set_limits("default", fair=True)
    assert statements_of(enqueue) == [False, True]  # found fair: nothing written, then with turns
    assert statements_of(enqueue) == [True]
    assert turns(engine, statements_of.ids) == [0, 1, 2]  # making the queue fair gave the first its turn
    queue.engine.dispose()
