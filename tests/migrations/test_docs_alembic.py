"""docs/how-to/alembic-integration.md, run as written.

The page marks its examples up for this test, invisibly in rendered Markdown:
``<!-- scenario: NAME -->`` starts (or resumes) a scenario, which runs in a directory and a
database of its own; ``<!-- file: PATH -->`` before a fenced block writes that block to PATH;
in a ``console`` block each ``$ `` line is a command, and each line after it must begin a line
of its output (``…`` stands for any text: a generated revision id, a path). Output starting with ``FAILED:`` or ``Error:`` means the command must fail.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from migration_helpers import REPO, Shell

DOC = REPO / "docs" / "how-to" / "alembic-integration.md"
_TOKENS = re.compile(r"<!-- (scenario|file): (\S+) -->|```(\w+)\n(.*?)```", re.S)


@dataclass
class Command:
    line: str
    expected: list[str] = field(default_factory=list)

    @property
    def must_fail(self) -> bool:
        return bool(self.expected) and self.expected[0].startswith(("FAILED:", "Error:"))


def scenarios() -> dict[str, list]:
    """Scenario name -> its steps in page order: (path, content) files and Commands."""
    found: dict[str, list] = {}
    steps = None
    pending_file = None
    for kind, value, language, body in _TOKENS.findall(DOC.read_text()):
        if kind == "scenario":
            steps = found.setdefault(value, [])
        elif kind == "file":
            pending_file = value
        elif pending_file is not None:
            steps.append((pending_file, body))
            pending_file = None
        elif language == "console":
            assert steps is not None, "a console block before any scenario marker"
            steps.extend(parse_console(body))
    return found


def parse_console(body: str) -> list[Command]:
    commands: list[Command] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            commands.append(Command(line[2:]))
        elif line.strip():
            assert commands, f"output before any command: {line!r}"
            commands[-1].expected.append(line.strip())
    return commands


def copy_maintainers_environment(root: Path) -> None:
    """The contributor scenario runs at a repository root: a copy, so the new revision it
    generates lands in the copy, not in the package."""
    shutil.copy(REPO / "pyproject.toml", root)
    shutil.copytree(REPO / "alembic", root / "alembic")
    versions = root / "sqla_queue" / "migrations" / "versions"
    versions.mkdir(parents=True)
    for revision in (REPO / "sqla_queue" / "migrations" / "versions").glob("*.py"):
        shutil.copy(revision, versions)


SCENARIOS = scenarios()


def test_the_page_covers_the_four_ways_the_hazard_and_contributors():
    assert set(SCENARIOS) == {"install", "sqla-queue-db", "host-alembic", "host-model", "contributor"}
    lines = [step.line for steps in SCENARIOS.values() for step in steps if isinstance(step, Command)]
    assert {"sqla-queue alembic install --config alembic.ini", "alembic upgrade head", "alembic revision --autogenerate -m orders"} <= set(lines)
    assert {"sqla-queue db upgrade", "alembic upgrade heads", "alembic check", "sqla-queue db current"} <= set(lines)
    assert "alembic -c without-queue.ini current" in lines


def test_every_command_on_the_page_is_run():
    blocks = re.findall(r"```console\n(.*?)```", DOC.read_text(), re.S)
    on_page = [line[2:] for block in blocks for line in block.splitlines() if line.startswith("$ ")]
    parsed = [step.line for steps in SCENARIOS.values() for step in steps if isinstance(step, Command)]
    assert sorted(parsed) == sorted(on_page)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_runs_as_written(name: str, tmp_path: Path, create_database):
    shell = Shell(cwd=tmp_path, url=create_database(migrate=False))
    if name == "contributor":
        copy_maintainers_environment(tmp_path)
    for step in SCENARIOS[name]:
        if isinstance(step, Command):
            run(shell, step)
        else:
            path, content = step
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_text(content)
    if name == "contributor":
        assert list(tmp_path.glob("sqla_queue/migrations/versions/sqlaq_0013_*.py"))


def run(shell: Shell, command: Command) -> None:
    result = shell.run(command.line, check=False)
    output = result.stdout + result.stderr
    failed = result.returncode != 0
    assert failed == command.must_fail, f"`{command.line}` exited {result.returncode}:\n{output}"
    printed = [line.strip() for line in output.splitlines()]
    for line in command.expected:
        pattern = re.compile(".*".join(re.escape(part) for part in line.split("…")))
        assert any(pattern.match(p) for p in printed), f"`{command.line}` did not print {line!r}:\n{output}"
