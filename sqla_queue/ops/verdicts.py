"""The doctor's answer: a `Verdict` per `Check`, and the `Report` of a run, which the CLI prints
(as a table or JSON) and the dashboard's doctor page shows."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any


class Verdict(str, Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Check:
    """One check's outcome: `summary` is one line; `details` are the evidence (sessions, slots,
    queues); `hint` says what to do and is empty when there is nothing to do."""

    name: str
    verdict: Verdict
    summary: str
    hint: str = ""
    details: tuple[str, ...] = ()


@dataclass(frozen=True)
class Report:
    checks: tuple[Check, ...]

    def worst(self, *, strict: bool = False) -> Verdict:
        verdicts = {c.verdict for c in self.checks}
        if Verdict.FAIL in verdicts or (strict and Verdict.WARN in verdicts):
            return Verdict.FAIL
        return Verdict.WARN if Verdict.WARN in verdicts else Verdict.OK

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.worst().value,
            "checks": [
                {"name": c.name, "verdict": c.verdict.value, "summary": c.summary,
                 "hint": c.hint, "details": list(c.details)}
                for c in self.checks
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)
