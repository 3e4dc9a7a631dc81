"""The plugin pages say what the code does: their ``console`` commands run as written, and the
hook reference's table of observer hooks is the one the loader uses.

Each ``$ `` line of a ``console`` block runs in a shell with the test environment's
``sqla-queue`` first on PATH and no ``SQLA_QUEUE_*`` variable set; it must exit 0, and every
output line the page shows under it (``...`` stands for lines left out) must be printed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from sqla_queue import hookspecs
from sqla_queue.plugins.entry_points import LIFECYCLE_HOOKS, OBSERVER_HOOKS

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    "docs/how-to/write-a-backoff-plugin.md",
    "docs/how-to/write-a-dedupe-plugin.md",
    "plugins/sqla-queue-content-hash/README.md",
    "plugins/sqla-queue-decorrelated-jitter/README.md",
    "plugins/sqla-queue-prometheus/README.md",
    "plugins/sqla-queue-opentelemetry/README.md",
    "plugins/sqla-queue-sentry/README.md",
]


def console_steps(page: str) -> list[tuple[str, list[str]]]:
    """(command, output lines shown under it) for every ``$ `` line of the page."""
    steps: list[tuple[str, list[str]]] = []
    text = (ROOT / page).read_text()
    for block in re.findall(r"^```console\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif line.strip() and line.strip() != "...":
                steps[-1][1].append(line)
    return steps


def run(command: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, timeout=120)


STEPS = [(page, command, shown) for page in PAGES for command, shown in console_steps(page)]


def test_every_page_shows_how_to_see_the_plugins():
    assert {page for page, _, _ in STEPS} == set(PAGES)


@pytest.mark.parametrize(("page", "command", "shown"), STEPS, ids=[f"{p}: {c}" for p, c, _ in STEPS])
def test_console_commands_run_as_written(page, command, shown):
    done = run(command)
    assert done.returncode == 0, f"{page}: {command}\n{done.stderr}"
    printed = done.stdout.splitlines()
    for line in shown:
        assert line in printed, f"{page}: `{command}` did not print {line!r}"
    words = shlex.split(command)
    if "--json" in words:
        listed = {entry["name"]: entry for entry in json.loads(done.stdout)}
        for name in (words[i + 1] for i, word in enumerate(words) if word == "--plugin"):
            assert (listed[name]["status"], listed[name]["enabled_by"]) == ("enabled", "SQLA_QUEUE_PLUGINS")
        if "--plugin" not in words:
            assert listed["prometheus"]["enabled_by"] == "installed"


def test_the_hook_reference_lists_the_observer_hooks_the_loader_uses():
    page = (ROOT / "docs/reference/hooks.md").read_text()
    section = page.split("### Which installed plugins take part", 1)[1].split("\n### ", 1)[0]
    observer_row = next(line for line in section.splitlines() if line.startswith("| only **observer hooks**"))
    other_row = next(line for line in section.splitlines() if line.startswith("| **any other hook**"))
    assert set(re.findall(r"`(sqla_queue_\w+)`", observer_row)) == OBSERVER_HOOKS
    specs = {name for name in vars(hookspecs) if name.startswith("sqla_queue_")}
    assert set(re.findall(r"`(sqla_queue_\w+)`", other_row)) == specs - OBSERVER_HOOKS


def test_no_strategy_hook_counts_as_an_observer():
    """A firstresult hook answers for the queue: a plugin implementing it can never load on install."""
    for name in vars(hookspecs):
        if name.startswith("sqla_queue_"):
            firstresult = getattr(hookspecs, name).sqla_queue_spec["firstresult"]
            assert not (firstresult and name in OBSERVER_HOOKS), name
    assert LIFECYCLE_HOOKS < OBSERVER_HOOKS


def test_the_hook_reference_lists_exactly_the_builtins_a_queue_registers():
    """The built-in table of hooks.md is what ``sqla-queue plugins`` shows as builtin."""
    from sqla_queue.plugins.manager import build_plugin_manager, describe_plugins

    page = (ROOT / "docs/reference/hooks.md").read_text()
    table = page.split("**Built-in plugins**", 1)[1].split("\n\n", 2)[1]
    documented = dict(re.findall(r"^\| `(sqla_queue\.\w+)` \| ([^|]*) \|", table, flags=re.M))
    registered = {info.name: info.hooks for info in describe_plugins(build_plugin_manager(load_entrypoints=False))
                  if info.source == "builtin"}
    assert set(documented) == set(registered)
    for name, hooks in registered.items():
        if "every lifecycle event" not in documented[name]:
            assert set(re.findall(r"`(sqla_queue_\w+)`", documented[name])) == set(hooks), name


def test_the_hook_wrapper_refusal_points_at_a_paragraph_that_exists():
    import sqla_queue as sq

    class Wrapping:
        @sq.hookimpl(hookwrapper=True)
        def sqla_queue_job_failed(self):
            yield

    with pytest.raises(sq.ConfigurationError) as refused:
        sq.Queue("postgresql://unused", plugins=[Wrapping()], load_entrypoints=False)
    section = re.search(r"hooks\.md, '([^']+)'", str(refused.value)).group(1)
    assert f"**{section}**" in (ROOT / "docs/reference/hooks.md").read_text()
