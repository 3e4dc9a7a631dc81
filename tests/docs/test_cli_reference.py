"""docs/reference/cli.md is generated from the click commands (`sqla_queue.cli.reference`) and
must match them: a new or changed option fails here until the page is regenerated with
``python -m sqla_queue.cli.reference > docs/reference/cli.md``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sqla_queue.cli import main
from sqla_queue.cli.reference import help_texts, render

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"
COMMANDS = list(help_texts())


def test_the_page_is_the_generated_one():
    assert PAGE.read_text() == render(), (
        "docs/reference/cli.md is out of date: python -m sqla_queue.cli.reference > docs/reference/cli.md")


def test_every_command_is_on_the_page():
    paths = [path for path, _ in COMMANDS]
    assert {"sqla-queue", "sqla-queue worker", "sqla-queue jobs retry", "sqla-queue db upgrade"} <= set(paths)
    assert all(f"## `{path}`" in PAGE.read_text() for path in paths)


@pytest.mark.parametrize(("path", "text"), COMMANDS, ids=[path for path, _ in COMMANDS])
def test_each_section_is_what_help_prints(path, text):
    arguments = path.split()[1:]
    result = CliRunner().invoke(main, [*arguments, "--help"], prog_name="sqla-queue", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert result.output.rstrip() == text.rstrip()


def test_the_console_script_prints_the_same_help():
    script = Path(sys.executable).with_name("sqla-queue")
    env = {**os.environ, "COLUMNS": "200"}
    output = subprocess.run([str(script), "jobs", "list", "--help"], capture_output=True, text=True, env=env,
                            timeout=60, check=True).stdout
    assert output.rstrip() == dict(COMMANDS)["sqla-queue jobs list"].rstrip()


@pytest.mark.parametrize(("path", "text"), COMMANDS, ids=[path for path, _ in COMMANDS])
def test_no_help_text_shows_a_doubled_percent_sign(path, text):
    """click prints help verbatim, so a ``%%`` written for %-formatting shows as "20%%"."""
    assert "%%" not in text, f"{path} --help prints '%%'"


def test_doctor_help_says_20_percent():
    assert "above 20% of" in dict(COMMANDS)["sqla-queue doctor"]
