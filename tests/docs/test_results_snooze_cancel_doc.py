"""docs/how-to/results-snooze-cancel.md, run as written: every ``python`` block in page order,
in one namespace, against a fresh migrated database named by ``SQLA_QUEUE_DATABASE_URL``."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import sqla_queue as sq

DOC = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "results-snooze-cancel.md"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)


def test_the_page_runs_as_written(create_database, monkeypatch, capsys):
    monkeypatch.setenv("SQLA_QUEUE_DATABASE_URL", create_database())
    namespace: dict = {"__name__": "results_snooze_cancel_doc"}
    try:
        for number, block in enumerate(python_blocks(), start=1):
            exec(compile(block, f"results-snooze-cancel.md (python block {number})", "exec"), namespace)
    finally:
        queue = namespace.get("queue")
        if isinstance(queue, sq.Queue):
            asyncio.run(queue.dispose_async())
            queue.engine.dispose()
    printed = capsys.readouterr().out
    assert re.search(r"^job \d+ did not finish within 0.5s: it is still pending$", printed, flags=re.M)
    assert re.search(r"^digest stopped after \d+ emails$", printed, flags=re.M)

