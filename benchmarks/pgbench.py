"""Running pgbench on a script of the reference statements, and reading its report."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from .server import Database

_PATTERNS = {
    "clients": r"^number of clients: (\d+)",
    "threads": r"^number of threads: (\d+)",
    "transactions": r"^number of transactions actually processed: (\d+)",
    "failed": r"^number of failed transactions: (\d+)",
    "latency_ms": r"^latency average = ([\d.]+) ms",
    "tps": r"^tps = ([\d.]+) \(without initial connection time\)",
    "query_mode": r"^query mode: (\w+)",
}


def parse_output(text: str) -> dict:
    """The figures of a pgbench report; raises ValueError when it has no tps line (a failed run)."""
    found: dict = {}
    for key, pattern in _PATTERNS.items():
        match = re.search(pattern, text, re.MULTILINE)
        if match:
            value = match.group(1)
            found[key] = value if key == "query_mode" else (float(value) if "." in value else int(value))
    if "tps" not in found:
        raise ValueError(f"pgbench printed no tps line:\n{text[-2000:]}")
    found.setdefault("failed", 0)
    return found


def parse_progress(text: str) -> list[tuple[float, float]]:
    """``(seconds, tps)`` of each ``-P`` progress line (pgbench prints them on stderr)."""
    return [(float(t), float(tps)) for t, tps in re.findall(r"^progress: ([\d.]+) s, ([\d.]+) tps", text, re.MULTILINE)]


def run(db: Database, script: str, *, clients: int, transactions: int | None = None, defines: dict,
        seconds: int | None = None, progress: int | None = None) -> dict:
    """`script` with ``-M prepared``, `transactions` runs per client (or for `seconds`);
    parsed report + wall time (+ ``progress`` pairs every `progress` seconds)."""
    if db.pgbench is None:
        raise RuntimeError("pgbench is not available")
    with tempfile.TemporaryDirectory(prefix="sqlaq-pgbench-") as tmp:
        path = Path(tmp) / "script.sql"
        path.write_text(script)
        argv = [db.pgbench, "-n", "-M", "prepared", "-f", str(path), "-c", str(clients), "-j", "1"]
        argv += ["-T", str(seconds)] if seconds else ["-t", str(transactions)]
        if progress:
            argv += ["-P", str(progress)]
        for name, value in defines.items():
            argv += ["-D", f"{name}={value}"]
        argv += db.libpq_args
        proc = subprocess.run(argv, capture_output=True, text=True, env=db.libpq_env, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"pgbench failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result = parse_output(proc.stdout)
    result["seconds"] = result["transactions"] / result["tps"]
    result["progress"] = parse_progress(proc.stderr)
    return result
