"""The raw limit of a Python worker on sqla_queue's table, from process start:
``python raw_python_drain.py BATCH``, the psycopg DSN in ``$PGDSN``.

What no worker of a SQLAlchemy application can skip, and nothing else: the interpreter's start,
the import floor (SQLAlchemy, psycopg and the psycopg dialect, as `benchmarks.peers.IMPORT_FLOOR`
imports them), one psycopg connection in autocommit, then the reference claim and guarded
completion of section 1 (benchmarks/raw_sql.py), prepared, BATCH jobs at a time, until a claim
finds none. No handler runs, no thread hands a job over, no SQLAlchemy statement is built: a
bound that sqla_queue's own worker, which does all of those, can only approach. Its first claim
takes `FIRST` jobs, so that its first completion comes as soon as any worker's could (the
start-up bound) without slowing the drain. The peers section starts it like the CLI workers and
reads the same ``completed_at`` clock.
"""

from __future__ import annotations

import os
import sys

import psycopg

# The import floor: what a SQLAlchemy application's worker loads before it can connect.
import sqlalchemy
import sqlalchemy.dialects.postgresql.psycopg  # noqa: F401

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks import raw_sql  # plain strings: the reference statements

FIRST = 10


def main(batch: int) -> int:
    worker = f"raw-{os.getpid()}"
    first, claim = (raw_sql.inline_batch(raw_sql.CLAIM, size) for size in (min(FIRST, batch), batch))
    done = 0
    with psycopg.connect(os.environ["PGDSN"], autocommit=True) as conn:
        for n in range(1_000_000):
            token = f"{worker}-{n}"
            rows = conn.execute(claim if n else first, {"queue": raw_sql.QUEUE, "worker": worker, "token": token},
                                prepare=True).fetchall()
            if not rows:
                return done
            done += len(conn.execute(raw_sql.COMPLETE, {"ids": [r[0] for r in rows], "token": token},
                                     prepare=True).fetchall())
    return done


if __name__ == "__main__":
    print(main(int(sys.argv[1])))
