"""docs/how-to/test-your-handlers.md, run as written. The page holds two projects, the shop and,
after ``<!-- project: billing -->``, an existing application with its own Alembic history. Each
project's fenced blocks that start with ``# <file name>`` are its files (blocks of one file are
joined in page order); files and ``$ `` commands are taken in page order, in a temporary
directory with no database but the test server's (``SQLA_QUEUE_TEST_DATABASE_URL``) and the
pytest plugin sqla_queue installs. The failure message the page shows is checked against what
`enqueued` says in that situation."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

import sqla_queue as sq

from doc_blocks import blocks

DOC = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "test-your-handlers.md"
_TOKENS = re.compile(r"```(\w+)\n(.*?)```", re.S)
_SECOND = "<!-- project: billing -->"


def project_text(name: str) -> str:
    shop, _, billing = DOC.read_text().partition(_SECOND)
    return {"shop": shop, "billing": billing}[name]


def steps(name: str) -> list[tuple[str, str]]:
    """The project's ``("file", path)`` / ``("run", command)`` steps in page order; a file's
    content is every block of it, joined (`project_files`)."""
    found: list[tuple[str, str]] = []
    for language, body in _TOKENS.findall(project_text(name)):
        first = body.partition("\n")[0]
        if language == "console":
            found += [("run", line[2:]) for line in body.splitlines() if line.startswith("$ ")]
        elif match := re.fullmatch(r"# ([\w/.]+\.(?:py|ini))", first):
            if ("file", match.group(1)) not in found:
                found.append(("file", match.group(1)))
        else:
            assert language == "text", f"a {language} block must start with '# <file name>', not {first!r}"
    return found


def project_files(name: str = "shop") -> dict[str, str]:
    files: dict[str, list[str]] = {}
    for language, body in _TOKENS.findall(project_text(name)):
        match = re.fullmatch(r"# ([\w/.]+\.(?:py|ini))", body.partition("\n")[0])
        if language != "console" and match:
            files.setdefault(match.group(1), []).append(body)
    return {path: "\n\n".join(parts) for path, parts in files.items()}


def promised(name: str) -> str:
    return re.search(r"The output ends with `(\d+ passed)`", project_text(name)).group(1)


@pytest.mark.parametrize(("name", "files"), [
    ("shop", ["shop.py", "test_shop.py"]),
    ("billing", ["alembic.ini", "billing.py", "conftest.py", "migrations/env.py",
                 "migrations/versions/0001_invoices.py", "test_billing.py"]),
])
def test_the_page_is_a_project_whose_tests_pass(name, files, tmp_path, server_url):
    assert sorted(project_files(name)) == files
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SQLA_QUEUE_DATABASE_URL"))}
    env["SQLA_QUEUE_TEST_DATABASE_URL"] = server_url
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    content = project_files(name)
    output = ""
    for kind, value in steps(name):
        if kind == "file":
            (tmp_path / value).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / value).write_text(content[value])
            continue
        result = subprocess.run(["bash", "-c", value], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=300)
        output = result.stdout + result.stderr
        assert result.returncode == 0, f"`{value}`:\n{output}"
    assert steps(name)[-1] == ("run", f"pytest -q {files[-1]}")
    assert re.search(rf"^{promised(name)}(, \d+ warnings?)? in ", output.strip().splitlines()[-1]), output


def test_the_failure_message_shown_is_what_enqueued_says(tmp_path, create_database):
    (tmp_path / "doc_shop.py").write_text(project_files("shop")["shop.py"])
    spec = importlib.util.spec_from_file_location("doc_shop", tmp_path / "doc_shop.py")
    shop = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shop)
    engine = create_engine(create_database())
    try:
        shop.Base.metadata.create_all(engine)
        queue = shop.make_queue(engine, load_entrypoints=False)
        with Session(engine) as session:
            shop.place_order(session, queue, "ann@example.com")
            session.commit()
        found = sq.testing.enqueued(queue, "send_receipt", payload={"order_id": 2})
    finally:
        engine.dispose()
    [shown] = blocks(DOC, "text")
    expected = shown.strip().removeprefix("E       assert ")
    assert re.sub(r"due in 71:59:5\d", "due in 71:59:5x", repr(found)) == expected.replace("71:59:59", "71:59:5x")
