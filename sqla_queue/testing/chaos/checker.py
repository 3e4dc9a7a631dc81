"""After the schedule healed: every job, and every acknowledged enqueue, sorted into classes.

What the checker reads (`Observations`): the job table (status, attempts, the payload's ``n``
and ``try``, which say which enqueue call made the row), the effects table (committed effects
per job), the enqueuers' log (an ``intent`` line before each call, an ``ack`` line with the id
after it returned) and the workers' ``completed`` events (a completion the worker saw commit).

The classes (docs/explanation/fault-schedules.md), all failures but ``in_doubt``:

* ``lost``: an acknowledged id with no row: the enqueue committed and the job vanished.
* ``stuck``: a row that is not terminal (pending or running) after the heal: faults stopped,
  workers ran until nothing was due and the leases had passed.
* ``duplicated``: a job whose completion was accepted for more than one claim, or for a claim
  that was not its last (a stale claim's outcome applied while a newer claim held the job), or
  whose row is not ``completed`` although a completion was accepted (a later outcome
  overwrote it). A handler that merely *ran* twice is at-least-once delivery, not this.
* ``duplicate_effects``: a job with more than one committed row in the effects table.
* ``missing_effects``: a ``ctx.transaction()`` job that is completed with no committed effect.
* ``unexpected``: a row no enqueue call explains: its ``(n, try)`` was never attempted, or that
  call was acknowledged with another id (it inserted a row and reported a different one).
* ``in_doubt`` (reported, not a failure): a row made by a call that has an intent and no ack:
  the enqueuer was killed, or its connection cut, between sending the commit and logging the
  id. Such a job was committed without the caller learning its id, as with any database write
  whose reply is lost; it must still end terminal like any other (else it is ``stuck``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine, func, select

import sqla_queue as sq

from . import events
from .workload import TASKS, effects

FAILURE_CLASSES = ("lost", "duplicated", "duplicate_effects", "missing_effects", "stuck", "unexpected")
TERMINAL = frozenset({"completed", "failed", "cancelled"})
TRANSACTION_TASK = TASKS["transaction"]


@dataclass(frozen=True)
class Row:
    id: int
    status: str
    attempts: int
    task: str
    n: int | None
    attempt_of_call: int | None  # the enqueue call's ``try``


@dataclass
class Observations:
    rows: Mapping[int, Row]
    effects: Mapping[int, int] = field(default_factory=dict)   # job id -> committed effects
    intents: Iterable[tuple[int, int]] = ()                    # (n, try) of every call started
    acks: Iterable[tuple[int, int, int]] = ()                  # (n, try, id) of every call returned
    completions: Iterable[tuple[int, int]] = ()                # (job id, attempt) accepted


@dataclass(frozen=True)
class Verdict:
    classes: dict[str, list[int]]  # class -> job ids (for ``lost``: the acknowledged ids)

    @property
    def failed(self) -> bool:
        return any(self.classes[name] for name in FAILURE_CLASSES)

    def counts(self) -> dict[str, int]:
        return {name: len(ids) for name, ids in self.classes.items()}


def classify(seen: Observations) -> Verdict:
    acks = list(seen.acks)
    acked_ids = {job for _, _, job in acks}
    ack_of_call = {(n, attempt): job for n, attempt, job in acks}
    intents = set(seen.intents)
    classes = {
        "lost": sorted(acked_ids - set(seen.rows)),
        "stuck": sorted(r.id for r in seen.rows.values() if r.status not in TERMINAL),
        "duplicated": _duplicated(seen.rows, seen.completions),
        "duplicate_effects": sorted(job for job, count in seen.effects.items() if count > 1),
        "missing_effects": sorted(r.id for r in seen.rows.values() if r.task == TRANSACTION_TASK
                                  and r.status == "completed" and not seen.effects.get(r.id)),
        "unexpected": [],
        "in_doubt": [],
    }
    for row in sorted(seen.rows.values(), key=lambda r: r.id):
        call = (row.n, row.attempt_of_call)
        if call in ack_of_call:
            if ack_of_call[call] != row.id:
                classes["unexpected"].append(row.id)
        elif call in intents:
            classes["in_doubt"].append(row.id)
        else:
            classes["unexpected"].append(row.id)
    return Verdict(classes)


def _duplicated(rows: Mapping[int, Row], completions: Iterable[tuple[int, int]]) -> list[int]:
    claims = defaultdict(Counter)
    for job, attempt in completions:
        claims[job][attempt] += 1
    bad = []
    for job, accepted in claims.items():
        row = rows.get(job)
        several = len(accepted) > 1 or max(accepted.values()) > 1
        if several or row is None or row.status != "completed" or set(accepted) != {row.attempts}:
            bad.append(job)
    return sorted(bad)


def observe(engine: Engine, trace: Path, enqueues: Path) -> Observations:
    """Read the database and the logs of one finished run."""
    jobs = sq.Job.__table__
    with engine.connect() as conn:
        rows = {
            r.id: Row(r.id, r.status, r.attempts, r.task, _int(r.payload, "n"), _int(r.payload, "try"))
            for r in conn.execute(select(jobs.c.id, jobs.c.status, jobs.c.attempts, jobs.c.task, jobs.c.payload))
        }
        counted = dict(conn.execute(select(effects.c.job_id, func.count()).group_by(effects.c.job_id)).all())
    log = list(events.read(enqueues))
    return Observations(
        rows=rows,
        effects=counted,
        intents=[(e["n"], e["attempt"]) for e in log if e["event"] == "intent"],
        acks=[(e["n"], e["attempt"], e["job"]) for e in log if e["event"] == "ack"],
        completions=[(e["job"], e["attempt"]) for e in events.read(trace) if e["event"] == "completed"],
    )


def _int(payload, key: str) -> int | None:
    value = payload.get(key) if isinstance(payload, dict) else None
    return value if isinstance(value, int) else None
