"""docs/how-to/workflows.md, run as written: every ``python`` block in page order, in one
namespace, against a fresh migrated database; what they print is exactly the page's output
blocks (the fenced blocks without a language), in order."""

from __future__ import annotations

import re
from pathlib import Path

import sqla_queue as sq

DOC = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "workflows.md"


def blocks(language: str) -> list[str]:
    """The page's fenced blocks in `language` ("" for the output blocks), in page order."""
    fenced = re.findall(r"^```(\w*)\n(.*?)^```$", DOC.read_text(), flags=re.S | re.M)
    return [body for tag, body in fenced if tag == language]


def test_the_page_runs_as_written_and_prints_what_it_shows(create_database, monkeypatch, capsys):
    monkeypatch.setenv("SQLA_QUEUE_DATABASE_URL", create_database())
    namespace: dict = {"__name__": "workflows_doc"}
    try:
        for number, block in enumerate(blocks("python"), start=1):
            exec(compile(block, f"workflows.md (python block {number})", "exec"), namespace)
    finally:
        queue = namespace.get("queue")
        if isinstance(queue, sq.Queue):
            queue.engine.dispose()
    assert capsys.readouterr().out == "".join(blocks(""))
