"""The core's explanation and reference pages, kept honest.

Every ``python`` block of each page runs, in order, in one namespace, against a fresh migrated
database named by ``SQLA_QUEUE_DATABASE_URL`` (as the pages say). The API reference documents
every public name, with each Queue method's parameters exactly as the code declares them.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine

import sqla_queue as sq

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = [
    "explanation/state-machine.md",
    "explanation/delivery-semantics.md",
    "explanation/priorities.md",
    "explanation/retries.md",
    "explanation/scaling.md",
    "explanation/prefetch.md",
    "reference/api.md",
]
API = DOCS / "reference" / "api.md"


def python_blocks(page: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", (DOCS / page).read_text(), flags=re.S | re.M)


@pytest.mark.parametrize("page", PAGES)
def test_python_examples_run_against_a_real_database(page, create_database, monkeypatch):
    monkeypatch.setenv("SQLA_QUEUE_DATABASE_URL", create_database())
    blocks = python_blocks(page)
    assert blocks, f"{page} has no Python example"
    namespace: dict = {"__name__": "docs_example"}
    try:
        for number, block in enumerate(blocks, start=1):
            exec(compile(block, f"{page} (python block {number})", "exec"), namespace)
    finally:
        for value in namespace.values():
            if isinstance(value, Engine):
                value.dispose()


def _headings() -> list[str]:
    return re.findall(r"^### `([^`]+)`", API.read_text(), flags=re.M)


def _documented(name: str) -> bool:
    return any(re.match(rf"{re.escape(name)}(\(|$|\s)", heading) for heading in _headings())


@pytest.mark.parametrize("name", sorted(set(sq.__all__) - {"errors"}))
def test_every_public_name_has_a_heading(name):
    assert _documented(name), f"docs/reference/api.md has no '### `{name}`' heading"


def test_the_errors_module_is_described():
    assert "`errors` is the module `sqla_queue.errors`" in API.read_text()


QUEUE_MEMBERS = sorted(name for name, _ in inspect.getmembers(sq.Queue) if not name.startswith("_"))


@pytest.mark.parametrize("name", QUEUE_MEMBERS)
def test_every_public_queue_member_has_a_heading(name):
    assert _documented(f"Queue.{name}"), f"docs/reference/api.md has no '### `Queue.{name}`' heading"


def _split_parameters(heading: str) -> tuple[str, list[str]] | None:
    """``Queue.enqueue(task, payload, *, queue=None) -> int`` -> name and parameter texts."""
    start = heading.find("(")
    if start < 0:
        return None
    depth, end = 0, start
    for end in range(start, len(heading)):
        depth += {"(": 1, ")": -1}.get(heading[end], 0)
        if depth == 0:
            break
    parameters, depth, current = [], 0, ""
    for char in heading[start + 1 : end]:
        depth += {"(": 1, ")": -1, "[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parameters.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        parameters.append(current.strip())
    return heading[:start], parameters


SIGNED = [parsed for heading in _headings() if (parsed := _split_parameters(heading))]


def _unpacked_options(target) -> list[tuple[str, bool, bool]]:
    """The keywords a ``**options: Unpack[SomeOptions]`` parameter takes: each key of the
    TypedDict, keyword-only, optional (``total=False``). Annotations are strings here (``from
    __future__ import annotations``): the TypedDict is looked up in the function's module."""
    shown = []
    for parameter in inspect.signature(target).parameters.values():
        annotation = str(parameter.annotation)
        if parameter.kind is inspect.Parameter.VAR_KEYWORD and annotation.startswith("Unpack["):
            options = vars(sys.modules[target.__module__])[annotation.removeprefix("Unpack[").removesuffix("]")]
            shown += [(key, True, key in options.__optional_keys__) for key in options.__annotations__]
    return shown


@pytest.mark.parametrize(("name", "documented"), SIGNED, ids=[name for name, _ in SIGNED])
def test_documented_signature_matches_the_code(name, documented):
    owner, _, attribute = name.partition(".")
    target = getattr(sq, owner) if not attribute else getattr(getattr(sq, owner), attribute)
    real = [p for p in inspect.signature(target).parameters.values() if p.name != "self"]

    shown, keyword_only = [], False
    for text in documented:
        if text == "*":
            keyword_only = True
            continue
        param_name, has_default = text.split("=")[0].strip(), "=" in text
        shown.append((param_name, keyword_only, has_default))
    expected = [
        (p.name, p.kind is inspect.Parameter.KEYWORD_ONLY, p.default is not inspect.Parameter.empty)
        for p in real
        if p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in real):
        shown = [entry for entry in shown if not entry[0].startswith("**")]
        expected += _unpacked_options(target.__init__ if inspect.isclass(target) else target)
    # Positional parameters in their order; keyword-only ones in any order (callers name them).
    assert [e for e in shown if not e[1]] == [e for e in expected if not e[1]]
    assert sorted(e for e in shown if e[1]) == sorted(e for e in expected if e[1])
