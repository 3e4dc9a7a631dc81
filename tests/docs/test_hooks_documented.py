"""docs/reference/hooks.md and events.md kept in step with the code.

Every hookspec has a ``### `name``` heading whose first ``python`` block is its exact
signature, plus the parts a plugin author needs (when, parameters, return, hot path, an
example); no heading documents a hook that does not exist; every example plugin on the page
registers against the real specs; every lifecycle event's fields are in events.md.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from sqla_queue import hookspecs, types
from sqla_queue.plugins.manager import build_plugin_manager, describe_plugins

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reference"
HOOKS_PAGE = (DOCS / "hooks.md").read_text()
EVENTS_PAGE = (DOCS / "events.md").read_text()
SPECS = sorted(name for name in vars(hookspecs) if name.startswith("sqla_queue_"))
EVENTS = sorted({p.annotation for name in SPECS for p in inspect.signature(getattr(hookspecs, name)).parameters.values()
                 if p.name == "event"})
REQUIRED_PARTS = ("**When**", "**Parameters**", "**Return**", "**Hot path**", "**Example**")


def signature(name: str) -> str:
    """As the spec declares it: annotations are strings (``from __future__ import annotations``)."""
    spec = inspect.signature(getattr(hookspecs, name))
    params = ", ".join(f"{p.name}: {p.annotation}" for p in spec.parameters.values())
    return f"{name}({params}) -> {spec.return_annotation}"


def sections(page: str) -> dict[str, str]:
    parts = re.split(r"^#{2,3} `([^`]+)`\n", page, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_specs_are_found():
    assert "sqla_queue_retry_delay" in SPECS and "sqla_queue_empty_claim" in SPECS and len(SPECS) == 17


@pytest.mark.parametrize("name", SPECS)
def test_every_hook_has_a_heading_with_its_exact_signature(name):
    section = sections(HOOKS_PAGE).get(name)
    assert section is not None, f"docs/reference/hooks.md has no '### `{name}`' heading"
    blocks = python_blocks(section)
    assert blocks and blocks[0].strip() == signature(name), (
        f"the signature of {name} in hooks.md differs from the spec:\n  docs: "
        f"{blocks[0].strip() if blocks else None}\n  code: {signature(name)}"
    )


@pytest.mark.parametrize("name", SPECS)
def test_every_hook_section_says_when_what_and_how_hot(name):
    section = sections(HOOKS_PAGE)[name]
    missing = [part for part in REQUIRED_PARTS if part not in section]
    assert not missing, f"the {name} section of hooks.md lacks {', '.join(missing)}"


def test_no_heading_documents_a_hook_that_does_not_exist():
    documented = {name for name in sections(HOOKS_PAGE) if name.startswith("sqla_queue_")}
    assert documented == set(SPECS)


def test_every_example_plugin_on_the_page_registers_against_the_specs():
    namespace: dict = {"__name__": "hooks_md"}
    examples = [block for block in python_blocks(HOOKS_PAGE) if not block.startswith("sqla_queue_")]
    for number, block in enumerate(examples, start=1):
        exec(compile(block, f"hooks.md (example {number})", "exec"), namespace)
    plugins = [value for value in namespace.values()
               if inspect.isclass(value) and value.__module__ == "hooks_md"]
    manager = build_plugin_manager(plugins, load_entrypoints=False)  # validates every hookimpl
    hooked = {hook for info in describe_plugins(manager) if info.source == "explicit" for hook in info.hooks}
    assert hooked == set(SPECS), f"hooks.md has no example for {set(SPECS) - hooked}"


@pytest.mark.parametrize("event", EVENTS)
def test_every_event_and_field_is_in_events_md(event):
    section = sections(EVENTS_PAGE).get(event)
    assert section is not None, f"docs/reference/events.md has no '## `{event}`' heading"
    cls = getattr(types, event)
    for field in dataclasses.fields(cls):
        assert re.search(rf"^\| `{field.name}` \|", section, flags=re.M), (
            f"events.md does not describe {event}.{field.name}"
        )
