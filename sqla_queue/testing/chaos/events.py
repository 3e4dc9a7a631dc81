"""The run's trace: one JSON object a line in one file, appended by every process of the run
(workers, their handlers, enqueuers, the runner) with one ``write`` on an ``O_APPEND`` file, so
lines from processes never interleave and a process killed mid-run leaves whole lines behind."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def append(path: str | Path, event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, "t": round(time.time(), 4), "pid": os.getpid(), **fields}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read(path: str | Path) -> Iterator[dict]:
    """Every whole line; a line cut short (a process killed inside ``write``) is skipped."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return
    for line in text.splitlines():
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue
