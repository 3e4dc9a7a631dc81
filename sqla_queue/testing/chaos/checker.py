"""After the schedule healed: every job, and every acknowledged enqueue, sorted into classes.

What the checker reads (`Observations`): the job table (status, attempts, the ``meta``'s
``chaos_n`` and ``chaos_try``, which say which enqueue call made the row), the effects table (committed effects
per job), the enqueuers' log (an ``intent`` line before each call, an ``ack`` line with the id
after it returned) and the workers' ``completed`` events (a completion the worker saw commit).

The classes (docs/explanation/fault-schedules.md), all failures but ``in_doubt``:

* ``lost``: an acknowledged id with no row: the enqueue committed and the job vanished.
* ``stuck``: a row that is not terminal (pending or running) after the heal: faults stopped,
  workers ran until nothing was due and the leases had passed.
* ``duplicated``: a job whose completion was accepted for more than one claim, or for a claim
  that was not its last, or by a process that never held the claim it completed (a stale
  claim's outcome applied while a newer claim held the job), or whose committed effect carries
  another claim's token than the job's last, or whose row is not ``completed`` although a
  completion was accepted (a later outcome overwrote it). A handler that merely *ran* twice is
  at-least-once delivery, not this.
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

from sqlalchemy import Engine, select

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
    claim_token: str | None = None  # the last claim's (kept on a finished row)


@dataclass
class Observations:
    rows: Mapping[int, Row]
    effects: Mapping[int, list[str]] = field(default_factory=dict)  # job id -> committed effects' tokens
    intents: Iterable[tuple[int, int]] = ()            # (n, try) of every call started
    acks: Iterable[tuple[int, int, int]] = ()          # (n, try, id) of every call returned
    claims: Iterable[tuple[int, int, int]] = ()        # (job id, attempt, pid) of every claim
    completions: Iterable[tuple[int, int, int]] = ()   # (job id, attempt, pid) accepted


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
        "duplicated": _duplicated(seen.rows, seen.claims, seen.completions, seen.effects),
        "duplicate_effects": sorted(job for job, tokens in seen.effects.items() if len(tokens) > 1),
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


def _duplicated(rows: Mapping[int, Row], claims: Iterable[tuple[int, int, int]],
                completions: Iterable[tuple[int, int, int]], effects: Mapping[int, list[str]]) -> list[int]:
    held = set(claims)
    accepted = defaultdict(Counter)
    bad = set()
    for job, attempt, pid in completions:
        accepted[job][attempt] += 1
        if (job, attempt, pid) not in held:  # completed a claim this process never held
            bad.add(job)
    for job, counts in accepted.items():
        row = rows.get(job)
        several = len(counts) > 1 or max(counts.values()) > 1
        if several or row is None or row.status != "completed" or set(counts) != {row.attempts}:
            bad.add(job)
    for job, tokens in effects.items():
        row = rows.get(job)
        if row is not None and row.claim_token is not None and any(t != row.claim_token for t in tokens):
            bad.add(job)  # an effect committed under a claim that was not the job's last
    return sorted(bad)


def observe(engine: Engine, trace: Path, enqueues: Path) -> Observations:
    """Read the database and the logs of one finished run."""
    jobs = sq.Job.__table__
    with engine.connect() as conn:
        rows = {
            r.id: Row(r.id, r.status, r.attempts, r.task, _int(r.meta, "chaos_n"), _int(r.meta, "chaos_try"),
                      r.claim_token)
            for r in conn.execute(select(jobs.c.id, jobs.c.status, jobs.c.attempts, jobs.c.task, jobs.c.meta,
                                         jobs.c.claim_token))
        }
        committed = defaultdict(list)
        for job, token in conn.execute(select(effects.c.job_id, effects.c.claim_token).order_by(effects.c.id)):
            committed[job].append(token)
    log, runtime = list(events.read(enqueues)), list(events.read(trace))
    return Observations(
        rows=rows,
        effects=dict(committed),
        intents=[(e["n"], e["attempt"]) for e in log if e["event"] == "intent"],
        acks=[(e["n"], e["attempt"], e["job"]) for e in log if e["event"] == "ack"],
        claims=[(e["job"], e["attempt"], e["pid"]) for e in runtime if e["event"] == "claimed"],
        completions=[(e["job"], e["attempt"], e["pid"]) for e in runtime if e["event"] == "completed"],
    )


def _int(meta, key: str) -> int | None:
    value = meta.get(key) if isinstance(meta, dict) else None
    return value if isinstance(value, int) else None
