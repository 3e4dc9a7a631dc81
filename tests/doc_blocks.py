"""Reading a docs page's fenced blocks, for the tests that run a page as written."""

from __future__ import annotations

import re
from pathlib import Path


def blocks(page: Path, kind: str) -> list[str]:
    """The bodies of the page's ```kind fenced blocks, in order."""
    return re.findall(rf"```{kind}\n(.*?)```", page.read_text(), flags=re.S)


def console_commands(page: Path) -> list[str]:
    """The ``$ `` lines of the page's console blocks, without the prompt."""
    return [line[2:] for block in blocks(page, "console") for line in block.splitlines() if line.startswith("$ ")]
