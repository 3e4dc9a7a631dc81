"""The worked examples of docs/how-to/write-a-*-plugin.md run as written.

Every ``python`` block of a page runs, in order, in one namespace, against a fresh migrated
database named by ``SQLA_QUEUE_DATABASE_URL`` (as the pages say); then every ``test_*``
function the page defines is called, as the plugin author's pytest would. The ``toml`` block
must declare the page's plugin in the ``sqla_queue`` entry-point group.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from sqlalchemy import Engine

import sqla_queue as sq

HOWTO = Path(__file__).resolve().parents[2] / "docs" / "how-to"
PAGES = ["write-a-backoff-plugin.md", "write-a-dedupe-plugin.md"]


def blocks(page: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", (HOWTO / page).read_text(), flags=re.S | re.M)


@pytest.mark.parametrize("page", PAGES)
def test_the_worked_example_runs_and_its_tests_pass(page, create_database, monkeypatch):
    monkeypatch.setenv("SQLA_QUEUE_DATABASE_URL", create_database())
    code = blocks(page, "python")
    assert len(code) >= 3, f"{page} lost its worked example"
    namespace: dict = {"__name__": "howto_example"}
    try:
        for number, block in enumerate(code, start=1):
            exec(compile(block, f"{page} (python block {number})", "exec"), namespace)
        tests = [value for name, value in namespace.items() if name.startswith("test_") and callable(value)]
        assert len(tests) >= 2, f"{page} shows no tests for its plugin"
        for test in tests:
            test()
    finally:
        for value in namespace.values():
            if isinstance(value, Engine):
                value.dispose()
    assert isinstance(namespace["plugin"], object) and namespace["queue"].plugin_manager.is_registered(namespace["plugin"])


@pytest.mark.parametrize("page", PAGES)
def test_the_packaging_example_declares_a_sqla_queue_entry_point(page):
    (toml,) = blocks(page, "toml")
    project = tomllib.loads(toml)["project"]
    (target,) = project["entry-points"][sq.hookspecs.PROJECT_NAME].values()
    assert target.endswith(":plugin")
    assert any(dependency.startswith("sqla-queue") for dependency in project["dependencies"])
