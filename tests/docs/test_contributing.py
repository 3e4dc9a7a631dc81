"""CONTRIBUTING.md stays true: every file, directory and module it names exists, and the README
points contributors to it."""

from __future__ import annotations

import re
from pathlib import Path

from test_user_words import INTERNAL

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "CONTRIBUTING.md"
CODE = re.compile(r"`([^`\s]+)`")
TOP_LEVEL = ("sqla_queue/", "tests/", "docs/", "benchmarks/", "examples/")


def named_paths() -> list[str]:
    return [token for token in CODE.findall(PAGE.read_text()) if token.startswith(TOP_LEVEL)]


def named_files() -> list[str]:
    """Bare module file names (``queue.py``, ``root.py``), found anywhere in the package."""
    return [token for token in CODE.findall(PAGE.read_text()) if token.endswith(".py") and "/" not in token]


def statement_modules() -> list[str]:
    """The modules listed in the row about ``sqla_queue/sql/``."""
    row = next(line for line in PAGE.read_text().splitlines() if "| `sqla_queue/sql/`" in line)
    return CODE.findall(row.split("one module per concern", 1)[1])


def test_every_path_it_names_exists():
    assert named_paths(), "the page names no path: the pattern is broken"
    missing = [path for path in named_paths() if not (ROOT / path).exists()]
    assert not missing, "CONTRIBUTING.md names paths that do not exist: " + ", ".join(missing)


def test_every_module_file_it_names_exists():
    package = {path.name for path in (ROOT / "sqla_queue").rglob("*.py")}
    assert named_files()
    missing = [name for name in named_files() if name not in package]
    assert not missing, "CONTRIBUTING.md names modules sqla_queue/ does not have: " + ", ".join(missing)


def test_every_statement_module_it_lists_exists():
    modules = statement_modules()
    assert "claim" in modules
    sql = ROOT / "sqla_queue" / "sql"
    missing = [name for name in modules if not ((sql / f"{name}.py").exists() or (sql / name / "__init__.py").exists())]
    assert not missing, "CONTRIBUTING.md lists statement modules sqla_queue/sql/ does not have: " + ", ".join(missing)


def test_the_readme_links_it_and_it_speaks_plainly():
    assert "](CONTRIBUTING.md)" in (ROOT / "README.md").read_text()
    assert INTERNAL.findall(PAGE.read_text()) == []
