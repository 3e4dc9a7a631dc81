"""docs/how-to/test-your-handlers.md, run as written: its ``python`` blocks are the files of a
project (each block starts with ``# <file name>``; blocks of one file are joined in page order),
written to a temporary directory with no conftest.py, and its console command runs there with
the pytest plugin sqla_queue installs. The failure message the page shows is checked against
what `enqueued` says in that situation."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

from sqlalchemy import create_engine
from sqlalchemy.orm import Session

import sqla_queue as sq

from doc_blocks import blocks, console_commands

DOC = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "test-your-handlers.md"


def project_files() -> dict[str, str]:
    files: dict[str, list[str]] = {}
    for block in blocks(DOC, "python"):
        first, _, body = block.partition("\n")
        name = re.fullmatch(r"# (\w+\.py)", first)
        assert name, f"a python block must start with '# <file name>', not {first!r}"
        files.setdefault(name.group(1), []).append(block)
    return {name: "\n\n".join(parts) for name, parts in files.items()}


def test_the_page_is_a_project_whose_tests_pass(tmp_path, server_url):
    for name, text in project_files().items():
        (tmp_path / name).write_text(text)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shop.py", "test_shop.py"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["SQLA_QUEUE_TEST_DATABASE_URL"] = server_url
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    [command] = console_commands(DOC)

    result = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)

    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    promised = re.search(r"The output ends with `(\d+ passed)`", DOC.read_text()).group(1)
    assert re.search(rf"^{promised}(, \d+ warnings?)? in ", output.strip().splitlines()[-1]), output


def test_the_failure_message_shown_is_what_enqueued_says(tmp_path, create_database):
    (tmp_path / "doc_shop.py").write_text(project_files()["shop.py"])
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
